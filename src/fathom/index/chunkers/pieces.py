"""The pieces a file is cut into (definitions, sections and the gaps between them) and how a
piece becomes chunks: whole when it fits the `Limits`, else as overlapping line windows; tiny
fragments join a neighbour. `Doc` is one file being chunked; both chunkers (code and docs) emit
through it, and a file with no grammar or headings is all windows.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, replace

from fathom.index.chunk import Chunk
from fathom.index.chunkers.limits import TINY_CHARS, Limits


@dataclass(frozen=True)
class Piece:
    start: int  # 0-based row, inclusive
    end: int  # 0-based row, inclusive
    symbol: str | None
    kind: str  # "def" (a definition or section) or "gap" (code between definitions)
    symbol_kind: str | None = None  # "function", "method" or "class" (see SYMBOL_KINDS)


@dataclass
class Doc:
    path: str
    language: str
    table: str
    lines: list[str]
    limits: Limits

    def __post_init__(self) -> None:
        # Prefix sums: size checks run for every definition at every nesting level.
        self._offsets = [0]
        for line in self.lines:
            self._offsets.append(self._offsets[-1] + len(line) + 1)

    def chars(self, start: int, end: int) -> int:
        return self._offsets[end + 1] - self._offsets[start] - 1

    def fits(self, start: int, end: int) -> bool:
        return end - start + 1 <= self.limits.max_lines and self.chars(start, end) <= self.limits.max_chars

    def solid(self, start: int, end: int) -> int:
        """Non-whitespace characters in rows start..end."""
        return sum(len("".join(line.split())) for line in self.lines[start : end + 1])

    def blank(self, row: int) -> bool:
        return not self.lines[row].strip()

    def chunk(
        self, start: int, end: int, symbol: str | None, text: str | None = None, kind: str | None = None
    ) -> Chunk:
        if text is None:
            text = "\n".join(self.lines[start : end + 1])
        return Chunk(
            path=self.path,
            language=self.language,
            table=self.table,
            start_line=start + 1,
            end_line=end + 1,
            symbol=symbol,
            text=text,
            kind=kind,
        )

    def windows_of_file(self) -> list[Chunk]:
        out: list[Chunk] = []
        for start, end in runs_of_content(self, 0, len(self.lines) - 1):
            out.extend(self.windows(start, end, None, self.limits.window_lines))
        return out

    def emit(self, pieces: Iterator[Piece] | list[Piece]) -> list[Chunk]:
        out: list[Chunk] = []
        unique: dict[tuple[int, int], Piece] = {}
        for piece in pieces:
            # Two definitions on one line (minified code) would otherwise repeat that line.
            unique.setdefault((piece.start, piece.end), piece)
        for piece in _merge_tiny(self, sorted(unique.values(), key=lambda p: (p.start, p.end))):
            start, end = self.trim(piece.start, piece.end)
            if start > end:
                continue
            if self.fits(start, end):
                out.append(self.chunk(start, end, piece.symbol, kind=piece.symbol_kind))
            else:
                out.extend(
                    self.windows(start, end, piece.symbol, self.limits.max_lines, kind=piece.symbol_kind)
                )
        return out

    def trim(self, start: int, end: int) -> tuple[int, int]:
        while start <= end and self.blank(start):
            start += 1
        while end >= start and self.blank(end):
            end -= 1
        return start, end

    def windows(
        self, start: int, end: int, symbol: str | None, max_lines: int, *, kind: str | None = None
    ) -> list[Chunk]:
        """Overlapping windows over rows start..end, cut at blank lines when one is near."""
        limits = self.limits
        out: list[Chunk] = []
        chunk = functools.partial(self.chunk, kind=kind)
        row = start
        while row <= end:
            if self.blank(row):
                row += 1
                continue
            line = self.lines[row]
            if len(line) > limits.max_chars:
                # One line longer than a whole chunk (minified code, a data blob): slice it,
                # so no single chunk outgrows what an encoder reads.
                for at in range(0, len(line), limits.max_chars):
                    out.append(chunk(row, row, symbol, line[at : at + limits.max_chars]))
                row += 1
                continue
            last, size = row, len(line)
            while (
                last < end
                and last - row + 1 < max_lines
                and size + 1 + len(self.lines[last + 1]) <= limits.max_chars
            ):
                last += 1
                size += 1 + len(self.lines[last])
            if last < end:
                # Prefer to end at a paragraph break in the window's second half: a window
                # that stops between two blocks needs no overlap to keep its context.
                for probe in range(last, row + (last - row) // 2, -1):
                    if self.blank(probe):
                        s, e = self.trim(row, probe)
                        out.append(chunk(s, e, symbol))
                        row = probe + 1
                        break
                else:
                    s, e = self.trim(row, last)
                    out.append(chunk(s, e, symbol))
                    # Overlap at most a quarter of the window, so windows cut short by long
                    # lines do not repeat each other.
                    row = last + 1 - min(limits.overlap, (last - row) // 4)
                continue
            s, e = self.trim(row, last)
            out.append(chunk(s, e, symbol))
            row = last + 1
        return out


def runs_of_content(doc: Doc, start: int, end: int) -> Iterator[tuple[int, int]]:
    """Maximal row ranges in start..end holding content, split at runs of 2+ blank lines."""
    run_start: int | None = None
    blanks = 0
    for row in range(start, end + 1):
        if doc.blank(row):
            blanks += 1
            continue
        if run_start is None:
            run_start = row
        elif blanks >= 2:
            yield run_start, row - blanks - 1
            run_start = row
        blanks = 0
    if run_start is not None:
        last = end
        while doc.blank(last):
            last -= 1
        yield run_start, last


def _merge_tiny(doc: Doc, pieces: list[Piece]) -> list[Piece]:
    """Fold fragments too small to mean anything ("}", a lone import) into a neighbour."""
    out: list[Piece] = []
    pending: Piece | None = None  # a tiny piece waiting to be prepended to the next one

    def touching(a: Piece, b: Piece) -> bool:
        # Only blank lines (or nothing) between them: the merged text is still one block.
        return b.start <= a.end + 1 or all(doc.blank(r) for r in range(a.end + 1, b.start))

    def family(tiny: Piece, other: Piece) -> bool:
        return (
            tiny.symbol is not None
            and other.symbol is not None
            and (other.symbol == tiny.symbol or other.symbol.startswith(tiny.symbol + "."))
        )

    for index, piece in enumerate(pieces):
        if pending is not None:
            if touching(pending, piece) and doc.fits(
                min(pending.start, piece.start), max(pending.end, piece.end)
            ):
                piece = replace(piece, start=min(pending.start, piece.start), end=max(pending.end, piece.end))
            else:
                out.append(pending)
            pending = None
        tiny = piece.kind == "gap" and doc.solid(piece.start, piece.end) < TINY_CHARS
        if not tiny:
            out.append(piece)
            continue
        following = pieces[index + 1] if index + 1 < len(pieces) else None
        prev = out[-1] if out else None
        prefer_next = (
            following is not None and family(piece, following) and not (prev and family(piece, prev))
        )
        if (
            prev is not None
            and not prefer_next
            and touching(prev, piece)
            and doc.fits(prev.start, max(prev.end, piece.end))
        ):
            out[-1] = replace(prev, end=max(prev.end, piece.end))
        elif following is not None and (piece.symbol is None or family(piece, following)):
            # Top-level fragments (imports) lead into what follows; a fragment of a class
            # joins only that class's own members.
            pending = piece
        else:
            out.append(piece)
    if pending is not None:
        out.append(pending)
    return out
