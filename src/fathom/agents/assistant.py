"""`ask`: the code-assistant role's retrieval-augmented answer, with citations.

What it owns: retrieving the chunks a question needs (code and docs, through the search
pipeline and its reranker stage), laying them out as numbered context blocks labelled
`path:start-end`, asking the code-assistant role's provider (default `poolside/laguna-s-2.1`,
routed by the role's policy through `call_role`, so a cloud call takes a budget permit), and
turning what the model cites — `[n]` block numbers or `path:start-end` labels — into citations
of line ranges that were actually retrieved.

It refuses to pass off a citation it cannot back: a cited path or line range that is not in
the context is reported in `Answer.rejected`, never in `Answer.citations`. It does not read
files itself (only what the index returned is context) and it never writes anything.

API:
    CodeAssistant(fathom, router, *, reranker=None, k_code=6, k_docs=3,
                  max_block_chars=2400, max_context_chars=14000, max_answer_tokens=1024)
    await assistant.ask(question, project=None) -> Answer
    await ask(fathom, router, question, project=None, **options) -> Answer
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from fathom.agents.tools import Span, find_spans
from fathom.errors import ConfigError, FathomError
from fathom.index.request import SearchRequest
from fathom.inference.provider import Provider
from fathom.inference.router import Router, call_role
from fathom.roles import Role

if TYPE_CHECKING:  # pragma: no cover
    from fathom.service import Fathom

SYSTEM_PROMPT = (
    "You are Fathom's code assistant. Answer the question from the numbered context blocks "
    "only: they are the parts of the project that the search retrieved. Cite every claim with "
    "its block number in brackets, e.g. [2], or with the block's label path:start-end. If the "
    "context does not hold the answer, say so plainly instead of guessing."
)

_BLOCK_REF = re.compile(r"\[(\d{1,3})\]")


@dataclass(frozen=True)
class ContextBlock:
    number: int
    project: str
    table: str
    span: Span
    symbol: str | None
    language: str
    text: str

    @property
    def label(self) -> str:
        return str(self.span)

    def render(self) -> str:
        about = ", ".join(x for x in (self.table, self.language, self.symbol) if x)
        return f"[{self.number}] {self.label} ({about})\n```{self.language}\n{self.text}\n```"


@dataclass(frozen=True)
class Citation:
    project: str
    path: str
    start_line: int
    end_line: int
    block: int  # the context block it points at

    def __str__(self) -> str:
        return str(Span(self.path, self.start_line, self.end_line))


@dataclass(frozen=True)
class Answer:
    question: str
    answer: str
    citations: list[Citation]
    rejected: list[str]  # citations in the answer that name nothing retrieved, with why
    context: list[ContextBlock] = field(repr=False)
    provider: str | None = None
    model: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    reranked: bool = False
    notes: list[str] = field(default_factory=list)  # e.g. why the docs table was left out

    def as_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "answer": self.answer,
            "citations": [asdict(c) | {"label": str(c)} for c in self.citations],
            "rejected": self.rejected,
            "context": [
                {
                    "number": b.number,
                    "label": b.label,
                    "project": b.project,
                    "table": b.table,
                    "symbol": b.symbol,
                }
                for b in self.context
            ],
            "provider": self.provider,
            "model": self.model,
            "usage": self.usage,
            "reranked": self.reranked,
            "notes": self.notes,
        }


class CodeAssistant:
    def __init__(
        self,
        fathom: Fathom,
        router: Router,
        *,
        reranker: Router | Provider | None = None,
        k_code: int = 6,
        k_docs: int = 3,
        max_block_chars: int = 2400,
        max_context_chars: int = 14000,
        max_answer_tokens: int = 1024,
    ):
        if k_code < 0 or k_docs < 0 or k_code + k_docs == 0:
            raise ConfigError("ask needs at least one context chunk: set k_code or k_docs above 0")
        self.fathom, self.router, self.reranker = fathom, router, reranker
        self.k_code, self.k_docs = k_code, k_docs
        self.max_block_chars, self.max_context_chars = max_block_chars, max_context_chars
        self.max_answer_tokens = max_answer_tokens

    async def retrieve(
        self, question: str, project: str | None
    ) -> tuple[list[ContextBlock], bool, list[str]]:
        """Numbered blocks (code first, then docs), whether the code was reranked, notes."""
        blocks: list[ContextBlock] = []
        notes: list[str] = []
        reranked = False
        used = 0
        for table, k in (("code", self.k_code), ("docs", self.k_docs)):
            if k == 0:
                continue
            try:
                results = await self.fathom.searches.ranking(
                    SearchRequest(question, project, table, k), reranker=self.reranker
                )
            except FathomError as exc:
                if table == "code":
                    raise
                notes.append(f"docs left out: {exc}")  # a project without docs still gets an answer
                continue
            if table == "code":
                reranked = results.reranked
                if not results.reranked and results.reason:
                    notes.append(results.reason)
            for h in results.hits:
                text = (h.text or h.snippet)[: self.max_block_chars]
                if used + len(text) > self.max_context_chars and blocks:
                    notes.append(f"context full at {len(blocks)} blocks")
                    break
                used += len(text)
                blocks.append(
                    ContextBlock(
                        len(blocks) + 1,
                        h.project,
                        h.table,
                        Span(h.path, h.start_line, h.end_line),
                        h.symbol,
                        h.language,
                        text,
                    )
                )
        return blocks, reranked, notes

    def messages(self, question: str, blocks: list[ContextBlock]) -> list[dict[str, Any]]:
        context = "\n\n".join(b.render() for b in blocks)
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Context:\n\n{context}\n\nQuestion: {question}"},
        ]

    async def ask(self, question: str, project: str | None = None) -> Answer:
        if not isinstance(question, str) or not question.strip():
            raise ConfigError("the question is empty: ask something about the code")
        blocks, reranked, notes = await self.retrieve(question, project)
        if not blocks:
            raise ConfigError(
                "nothing was retrieved for this question: index the project "
                "first (`fathom index PATH`) or rephrase it"
            )
        served = await call_role(
            self.router,
            Role.CODE_ASSISTANT,
            lambda p: p.chat(self.messages(question, blocks), max_tokens=self.max_answer_tokens),
            project=project,
        )
        result = served.value
        text = result.content or ""
        citations, rejected = cite(text, blocks)
        return Answer(
            question,
            text,
            citations,
            rejected,
            blocks,
            served.provider.id,
            result.model,
            dict(result.usage),
            reranked,
            notes,
        )


def cite(answer: str, blocks: list[ContextBlock]) -> tuple[list[Citation], list[str]]:
    """The context blocks `answer` cites, by `[n]` or by `path:start-end` overlapping a block;
    and every citation it makes that points at nothing retrieved, with the reason."""
    by_number = {b.number: b for b in blocks}
    chosen: list[ContextBlock] = []
    rejected: list[str] = []

    def take(block: ContextBlock) -> None:
        if block not in chosen:
            chosen.append(block)

    for m in _BLOCK_REF.finditer(answer):
        n = int(m.group(1))
        if n in by_number:
            take(by_number[n])
        else:
            rejected.append(f"[{n}]: there is no context block {n}")
    for span in find_spans(answer):
        same_file = [b for b in blocks if span.path in (b.span.path, f"{b.project}/{b.span.path}")]
        if not same_file:
            rejected.append(f"{span}: {span.path} was not in the retrieved context")
            continue
        hit = [
            b for b in same_file if span.start_line <= b.span.end_line and b.span.start_line <= span.end_line
        ]
        if not hit:
            ranges = ", ".join(b.label for b in same_file)
            rejected.append(f"{span}: those lines were not retrieved (retrieved: {ranges})")
            continue
        for b in hit:
            take(b)
    citations = [
        Citation(b.project, b.span.path, b.span.start_line, b.span.end_line, b.number)
        for b in sorted(chosen, key=lambda b: b.number)
    ]
    return citations, rejected


async def ask(
    fathom: Fathom, router: Router, question: str, project: str | None = None, **options: Any
) -> Answer:
    return await CodeAssistant(fathom, router, **options).ask(question, project)
