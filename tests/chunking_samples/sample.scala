package ledger

import scala.collection.mutable

trait Account {
  def balance: BigDecimal
}

/** An account that records every posting. */
class Ledger(owner: String) extends Account {
  private val postings = mutable.ListBuffer.empty[BigDecimal]

  def post(amount: BigDecimal): Unit = {
    postings += amount
  }

  def balance: BigDecimal = postings.sum
}

object Ledger {
  def open(owner: String): Ledger = new Ledger(owner)
}

case class Posting(amount: BigDecimal, memo: String)

def summarize(ledger: Ledger): String =
  s"balance ${ledger.balance}"
