"""`ask` and `explore` answers held to the caller's `max_tokens`, as search answers are.

What it owns: the rule for what gives way when an answer is over the budget. The answer's
words and citations are what the caller asked for, so an exploration's trace goes first,
from its last step back (`trace_omitted` says how many); only then is the answer text itself
cut, at a word where it can be, and marked `truncated`. The cost counted is what the client
receives: the structured result twice (the SDK repeats it as JSON in the text block) and the
envelope, counted with the same tokenizer as every other answer (`answer_tokens`).

What it refuses to do: ask a model for a shorter answer, or drop a citation.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

from fathom.server.answer_tokens import ENVELOPE, AnswerTokens

A = TypeVar("A", bound=BaseModel)


def cost(answer: BaseModel, tokens: AnswerTokens) -> int:
    return 2 * tokens.total(answer.model_dump_json()) + ENVELOPE


def fit_answer(answer: A, max_tokens: int, tokens: AnswerTokens) -> A:
    """`answer` within `max_tokens`: its trace shortened first (if it has one), then its text."""
    if cost(answer, tokens) <= max_tokens:
        return answer
    trace = list(getattr(answer, "trace", None) or [])
    omitted = 0
    while trace and cost(answer, tokens) > max_tokens:
        trace.pop()
        omitted += 1
        answer = answer.model_copy(update={"trace": trace, "trace_omitted": omitted})
    text: str = getattr(answer, "answer", "")
    if cost(answer, tokens) <= max_tokens or not text:
        return answer

    def cut_to(n: int) -> A:
        space = text.rfind(" ", 0, n)  # at a word, unless that loses more than half
        return answer.model_copy(
            update={"answer": text[: space if space > n // 2 else n] + " …", "truncated": True}
        )

    lo, hi = 0, len(text)  # the longest prefix that fits: costs grow with the prefix
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cost(cut_to(mid), tokens) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return cut_to(lo)
