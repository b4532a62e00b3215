"""The unit of indexing: one chunk of one file, headed for the code or the docs table."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Chunk:
    path: str  # relative to the project root, POSIX separators
    language: str  # "python", "go", "markdown", "text", ...
    table: str  # "code" or "docs": which vector table it belongs to
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    symbol: str | None  # "Class.method", a heading path, or None for a line window
    text: str
    # What the symbol is: "function", "method" or "class" (classes, structs, interfaces,
    # traits, enums), for the searches' symbol-kind filter; None for a gap or a docs section.
    # Location metadata like the path and the lines: not part of the content key.
    kind: str | None = None

    @property
    def content_hash(self) -> str:
        """The content key of the chunk's vector: the hash of exactly what is embedded (the
        text; nothing is prepended to it). A chunk whose key is already in the table reuses
        that vector wherever its lines moved; only a new key is embedded. If context is ever
        embedded with the text, it must enter this key too."""
        return hashlib.sha256(self.text.encode("utf-8", "surrogatepass")).hexdigest()

    @property
    def chunk_id(self) -> str:
        """Stable identity of this chunk within its project (idempotent upserts key on it)."""
        raw = f"{self.path}\x00{self.start_line}\x00{self.end_line}\x00{self.content_hash}"
        return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:32]
