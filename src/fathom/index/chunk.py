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

    @property
    def content_hash(self) -> str:
        """Changes when the text changes; an incremental re-index re-embeds only these."""
        return hashlib.sha256(self.text.encode("utf-8", "surrogatepass")).hexdigest()

    @property
    def chunk_id(self) -> str:
        """Stable identity of this chunk within its project (idempotent upserts key on it)."""
        raw = f"{self.path}\x00{self.start_line}\x00{self.end_line}\x00{self.content_hash}"
        return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:32]
