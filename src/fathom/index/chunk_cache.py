"""The chunk cache of index runs: a file's chunks by (path, text, tokenizer), so a sync after
an edit re-parses the edited files only, and the one way a file's text becomes its chunks
(`chunk_and_fit`: chunked, then cut to the encoder's token limit).

It owns the memory bound of the cache (the text it holds; least recently used goes first) and
refuses to read a file or to decide what is indexed: the walker and `indexer.Discovery` do.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

from fathom.index.chunk import Chunk
from fathom.index.chunking import TokenCounter, chunk_file, fit_tokens


class ChunkCache:
    """The chunks of files already chunked, by (path, text): a sync after an edit re-parses
    the edited files only. Bounded by the text it holds; least recently used goes first."""

    def __init__(self, max_chars: int = 64 << 20):
        self.max_chars = max_chars
        self._items: OrderedDict[tuple[str, str, str], tuple[int, list[Chunk], int]] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def chunks(self, path: str, text: str, tokens: TokenCounter | None = None) -> tuple[list[Chunk], int]:
        """The file's chunks and how many were cut to fit `tokens` (cached per tokenizer)."""
        key = (
            path,
            hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
            tokens.key if tokens is not None else "",
        )
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit[1], hit[2]
        chunks, split = chunk_and_fit(path, text, tokens)
        with self._lock:
            if key not in self._items:
                self._items[key] = (len(text), chunks, split)
                self._chars += len(text)
            while self._chars > self.max_chars and len(self._items) > 1:
                _, (n, _, _) = self._items.popitem(last=False)
                self._chars -= n
        return chunks, split


def chunk_and_fit(path: str, text: str, tokens: TokenCounter | None) -> tuple[list[Chunk], int]:
    chunks = chunk_file(path, text)
    return fit_tokens(chunks, tokens) if tokens is not None and chunks else (chunks, 0)


# One per process: every run and sync of the server shares it.
SHARED = ChunkCache()
