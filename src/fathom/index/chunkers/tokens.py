"""Token counting and fitting: an encoder's tokenizer as chunking needs it (`TokenCounter`),
an estimate for an encoder whose tokenizer is not in this process (`EstimatedTokens`), and
`fit_tokens`, which holds chunks to the encoder's token limit by cutting at line boundaries
(a single line too long, at token boundaries inside it).

It refuses to drop text: a chunk over the limit is cut, never truncated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from fathom.index.chunk import Chunk


class TokenCounter(Protocol):
    """An encoder's tokenizer, as chunking needs it. `limit` is the longest input the encoder
    reads, special tokens included; `key` names tokenizer and limit (chunks cached under one
    key are valid for that key only)."""

    limit: int
    key: str

    def count(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text as the encoder reads it, special tokens included (one batch)."""
        ...

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """The (start, end) characters of each token of `text`, special tokens left out."""
        ...


class EstimatedTokens:
    """A `TokenCounter` for an encoder whose tokenizer is not in this process (a sidecar's or a
    cloud model, which declares only its limit): one token per `CHARS` characters, fewer than
    any tokenizer measured here gives code (2.8 for MiniLM's on Python), so a chunk it passes
    fits, at the price of chunks shorter than need be."""

    CHARS = 2

    def __init__(self, limit: int, *, key: str):
        self.limit, self.key = int(limit), f"estimate:{key}@{limit}"

    def count(self, texts: Sequence[str]) -> list[int]:
        return [-(-len(t) // self.CHARS) for t in texts]

    def offsets(self, text: str) -> list[tuple[int, int]]:
        return [(at, min(at + self.CHARS, len(text))) for at in range(0, len(text), self.CHARS)]


def fit_tokens(chunks: list[Chunk], tokens: TokenCounter) -> tuple[list[Chunk], int]:
    """The chunks with each one over `tokens.limit` cut at line boundaries (a single line too
    long, at token boundaries inside it), and how many had to be cut. Sizing in characters is
    only a guess at tokens: a chunk of dense code can hold twice the tokens of prose, and an
    encoder silently drops what is past its limit.

    Tokenizing is batched: one call counts every chunk of the file, one every line of the
    chunks that are over, one every run of lines proposed; only a run the tokenizer reads
    longer than its lines add up to (rare) is counted again on its own."""
    counts = tokens.count([c.text for c in chunks] + [""])
    special = counts.pop()
    over = [i for i, n in enumerate(counts) if n > tokens.limit]
    if not over:
        return chunks, 0
    lines = {i: chunks[i].text.split("\n") for i in over}
    flat = tokens.count([line for i in over for line in lines[i]])
    budget = tokens.limit - special
    runs: dict[int, list[tuple[int, int]]] = {}
    at = 0
    for i in over:
        sizes = [n - special for n in flat[at : at + len(lines[i])]]
        at += len(lines[i])
        runs[i] = _runs_of_lines(lines[i], sizes, budget)
    proposed = [(i, a, b) for i in over for a, b in runs[i] if b >= a]
    checked = tokens.count(["\n".join(lines[i][a : b + 1]) for i, a, b in proposed])
    fits = {(i, a, b) for (i, a, b), n in zip(proposed, checked) if n <= tokens.limit}
    by_chunk = set(over)
    out: list[Chunk] = []
    for i, chunk in enumerate(chunks):
        if i not in by_chunk:
            out.append(chunk)
            continue
        for a, b in runs[i]:
            if b < a:  # one line over the limit on its own: sliced by the tokenizer's offsets
                out.extend(_slices(chunk, a, lines[i][a], tokens))
            elif (i, a, b) in fits:
                out.append(_lines_chunk(chunk, lines[i], a, b))
            else:
                out.extend(_shrink(chunk, lines[i], a, b, tokens))
    return out, len(over)


def _runs_of_lines(lines: list[str], sizes: list[int], budget: int) -> list[tuple[int, int]]:
    """Greedy runs of whole lines whose summed sizes fit `budget`, blank lines trimmed at the
    ends; (row, row - 1) marks one line too long for any run."""
    runs: list[tuple[int, int]] = []
    row = 0
    while row < len(lines):
        if not lines[row].strip():
            row += 1
            continue
        if sizes[row] > budget:
            runs.append((row, row - 1))
            row += 1
            continue
        last, size = row, sizes[row]
        while last + 1 < len(lines) and size + sizes[last + 1] <= budget:
            last += 1
            size += sizes[last]
        end = last
        while end > row and not lines[end].strip():
            end -= 1
        runs.append((row, end))
        row = last + 1
    return runs


def _lines_chunk(chunk: Chunk, lines: list[str], a: int, b: int) -> Chunk:
    return replace(
        chunk,
        start_line=chunk.start_line + a,
        end_line=chunk.start_line + b,
        text="\n".join(lines[a : b + 1]),
    )


def _shrink(chunk: Chunk, lines: list[str], a: int, b: int, tokens: TokenCounter) -> list[Chunk]:
    """A run the tokenizer reads longer than its lines add up to: drop lines from its end
    until it fits, and go on from there."""
    out: list[Chunk] = []
    while a <= b:
        end = b
        while end > a and tokens.count(["\n".join(lines[a : end + 1])])[0] > tokens.limit:
            end -= 1
        if tokens.count([lines[a]])[0] > tokens.limit:
            out.extend(_slices(chunk, a, lines[a], tokens))
        elif lines[a].strip():
            out.append(_lines_chunk(chunk, lines, a, end))
        a = end + 1
    return out


def _slices(chunk: Chunk, row: int, line: str, tokens: TokenCounter) -> list[Chunk]:
    """One line over the limit, cut at token boundaries into slices that each fit. The line is
    tokenized once; a slice is counted again alone (its edges can tokenize differently) and
    cut shorter in the rare case it no longer fits."""
    special = tokens.count([""])[0]
    ends = [end for _, end in tokens.offsets(line)]
    step = tokens.limit - special
    out: list[Chunk] = []
    at, k = 0, 0
    while at < len(line):
        take = step
        while True:
            end = ends[min(k + take, len(ends)) - 1] if ends and k < len(ends) else len(line)
            end = max(end, at + 1)
            if take <= 1 or tokens.count([line[at:end]])[0] <= tokens.limit:
                break
            take = max(1, take * 9 // 10)
        piece = line[at:end]
        if piece.strip():
            out.append(
                replace(chunk, start_line=chunk.start_line + row, end_line=chunk.start_line + row, text=piece)
            )
        at = end
        while k < len(ends) and ends[k] <= at:
            k += 1
    return out
