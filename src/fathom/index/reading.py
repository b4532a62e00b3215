"""The indexed version of a file, read back from its chunks, and whether the file on disk
still matches it: what `read_code` serves.

What it owns: putting a file's lines back together from the rows of both tables (a chunk's
text is always the raw slice of its lines, so every chunk covering a line agrees on it; a
line no chunk covers was blank when indexed, since chunks are trimmed of blank lines), the
line range a caller asked for held to the file, and the comparison with the file now
(`disk_state`), read through the walker's one rule (`walker.read_one`), so a file a walk
leaves out — a secret, an ignored path, a link — is never read, and is refused to the caller
even when the index still holds it.

What it refuses to do: read anything but the store and, through the walker, the one file;
decide who may see a project (the store it is given is already the caller's scoped view).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fathom.errors import ConfigError
from fathom.index.chunk import Chunk
from fathom.index.chunkers.languages import source_lines
from fathom.index.walker import ReadRefused, SelectionOptions, read_one
from fathom.index.walking.reasons import MISSING

TABLES = ("code", "docs")


@dataclass(frozen=True)
class IndexedFile:
    """One file as the index holds it: `lines[n - 1]` is line n (None for a line cut into
    pieces that no chunk holds whole: a line longer than a chunk)."""

    project: str
    path: str
    language: str
    lines: tuple[str | None, ...]
    chunks: tuple[Chunk, ...]

    @property
    def last_line(self) -> int:
        return len(self.lines)

    def span(self, start: int | None, end: int | None) -> tuple[int, int]:
        """The asked range held to the file: `start` from 1, `end` at most the last line."""
        first = 1 if start is None else start
        last = self.last_line if end is None else min(end, self.last_line)
        if first > self.last_line:
            raise ConfigError(
                f"{self.path} has {self.last_line} lines as indexed; ask for a "
                f"start_line from 1 to {self.last_line}"
            )
        if last < first:
            raise ConfigError(
                f"end_line {end} comes before start_line {first}; give a range "
                f"such as start_line={first}, end_line={first + 40}"
            )
        return first, last


def assemble(project: str, path: str, chunks: Iterable[Chunk]) -> IndexedFile | None:
    """The file put back together from its chunks; None when the index holds none of it."""
    rows = sorted(chunks, key=lambda c: (c.start_line, c.end_line))
    if not rows:
        return None
    whole: dict[int, str] = {}
    pieces: dict[int, set[str]] = {}
    for chunk in rows:
        parts = chunk.text.split("\n")
        if len(parts) == chunk.end_line - chunk.start_line + 1 and len(parts) > 1:
            for n, line in enumerate(parts, start=chunk.start_line):
                whole.setdefault(n, line)
        else:  # one line: whole, or one of the pieces a line too long for a chunk was cut in
            pieces.setdefault(chunk.start_line, set()).add(chunk.text)
    for n, found in pieces.items():
        if n not in whole and len(found) == 1:
            whole[n] = next(iter(found))
    last = max(c.end_line for c in rows)
    lines = tuple(whole.get(n, None if n in pieces else "") for n in range(1, last + 1))
    language = next((c.language for c in rows if c.table == "code"), rows[0].language)
    return IndexedFile(project, path, language, lines, tuple(rows))


def indexed_file(store: Any, project: str, path: str) -> IndexedFile | None:
    """The file at `path` of `project` as its rows in both tables hold it."""
    found: list[Chunk] = []
    for table in TABLES:
        found += store.chunks(project, table, path=path)
    return assemble(project, path, found)


def chunk_by_id(store: Any, project: str, table: str, chunk_id: str) -> Chunk | None:
    rows = store.chunks(project, table, chunk_ids=[chunk_id])
    return rows[0] if rows else None


def matches(chunks: Sequence[Chunk], now: Sequence[str]) -> bool:
    """Whether the file's lines `now` still hold every chunk where the index put it, with
    nothing but blank lines after the last one."""
    for c in chunks:
        if c.end_line > len(now):
            return False
        here = "\n".join(now[c.start_line - 1 : c.end_line])
        if here != c.text and not (c.start_line == c.end_line and c.text in here):
            return False
    last = max((c.end_line for c in chunks), default=0)
    return not any(line.strip() for line in now[last:])


def disk_state(indexed: IndexedFile, root: Path | None, selection: SelectionOptions) -> str:
    """`unchanged`, `changed` or `deleted`: the file on disk now against its indexed version,
    read as a walk reads it. `ReadRefused` when a walk would leave the file out now (a secret,
    an ignored path, a link, a binary): the caller must not serve it."""
    if root is None:
        return "unknown"
    try:
        source = read_one(root, indexed.path, **selection)
    except ReadRefused as exc:
        if exc.reason == MISSING:
            return "deleted"
        raise
    return "unchanged" if matches(indexed.chunks, source_lines(source.text)) else "changed"
