using System;
using System.Collections.Generic;

namespace Shop.Billing
{
    /// <summary>Keeps the lines of one invoice.</summary>
    public class Invoice
    {
        private readonly List<decimal> _lines = new List<decimal>();

        public Invoice(string customer)
        {
            Customer = customer;
        }

        public string Customer { get; }

        public decimal Total()
        {
            decimal sum = 0;
            foreach (var line in _lines) sum += line;
            return sum;
        }
    }

    public interface IPricing
    {
        decimal PriceOf(string sku);
    }

    public enum Currency { Euro, Dollar, Yen }
}
