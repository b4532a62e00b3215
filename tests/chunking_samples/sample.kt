package shop.cart

import java.math.BigDecimal

data class Item(val sku: String, val price: BigDecimal)

/** A cart that sums its items. */
class Cart(private val items: MutableList<Item> = mutableListOf()) {
    fun add(item: Item) {
        items.add(item)
    }

    fun total(): BigDecimal =
        items.fold(BigDecimal.ZERO) { sum, item -> sum + item.price }

    companion object {
        fun empty() = Cart()
    }
}

object Prices {
    fun format(amount: BigDecimal): String {
        return "%.2f".format(amount)
    }
}

fun main() {
    println(Prices.format(Cart.empty().total()))
}
