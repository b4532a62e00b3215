"""Billing: invoices and the tax rules that apply to them."""

import decimal
from dataclasses import dataclass

RATE = decimal.Decimal("0.2")


@dataclass
class Invoice:
    """One invoice, with lines and a customer."""

    customer: str
    lines: list

    def total(self) -> decimal.Decimal:
        subtotal = sum(line.amount for line in self.lines)
        return subtotal + self.tax(subtotal)

    # Tax is computed on the subtotal, never per line.
    def tax(self, subtotal):
        return subtotal * RATE


def render(invoice: Invoice) -> str:
    return f"{invoice.customer}: {invoice.total()}"


if __name__ == "__main__":
    print(render(Invoice("acme", [])))
