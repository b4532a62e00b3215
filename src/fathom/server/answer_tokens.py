"""How many tokens an answer costs the agent that reads it: the budget every tool that returns
code is held to (`max_tokens`).

What it owns: the default and the bounds of `max_tokens` (one source for every tool's
parameter), and `AnswerTokens`, which counts text with a real tokenizer: the local encoder's
own (`tokenizer.json` in the model folder, read with the `tokenizers` package). That is not
the reading model's tokenizer (no client says which it is), but a WordPiece vocabulary cuts
code finer than the byte-pair vocabularies chat models use (MiniLM's: about 2.8 characters a
token on Python), so an answer it counts under the budget is under it for them too. Where the
folder holds no tokenizer (a sidecar- or cloud-only server), one token per `FALLBACK_CHARS`
characters stands in, and says so in `key`.

Each text is tokenized once. A page is costed hit by hit while it fills, then counted whole
as sent, and the whole repeats the hits' text. With a BERT-style tokenizer (its normalizer
works character by character, its pre-tokenizer cuts at every punctuation mark before the
WordPiece model sees a word) no token spans a `"`: a text's count is the sum of its pieces
between quotes, one token a quote. So the counter cuts texts at quotes and remembers each
piece's count (about `PIECES_HELD` bytes of them, least recently used out first): counting
the whole page costs a lookup per piece already counted and a tokenization of the new ones
only. The sum is the whole count exactly, not an estimate (tests/server/test_answer_tokens.py
holds them equal). Any other tokenizer counts every text whole.

What it refuses to do: decide what goes into an answer (the tools fill their answers against
it) or truncate anything itself.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fathom.service.ports import Configured

log = logging.getLogger(__name__)

# Claude Code refuses a tool result over 25,000 tokens: the default stays well under it, and
# so does the most a caller may ask for.
DEFAULT_MAX_TOKENS = 8000
MIN_MAX_TOKENS = 1000
MAX_MAX_TOKENS = 20000
FALLBACK_CHARS = 3
# The JSON-RPC envelope around a tool result (`jsonrpc`, `id`, `isError`, `resultType`, the
# server's `_meta`): 89 tokens measured; counted with room to spare.
ENVELOPE = 128
# About how many bytes of counted pieces the counter remembers (a page's worth many times
# over): a piece costs its characters and `PIECE_BYTES` for the string and its entry.
PIECES_HELD = 8 << 20
PIECE_BYTES = 160
QUOTE = '"'


def cuts_at_quotes(tokenizer: Any) -> bool:
    """Whether no token of `tokenizer` can span a `"`: a BERT normalizer (or none), BERT's
    pre-tokenizer, a WordPiece model, and no added token (matched in the text before all
    else: `[SEP]`, `[MASK]`…) holding a quote."""
    config = json.loads(tokenizer.to_str())
    normalizer = (config.get("normalizer") or {}).get("type", "BertNormalizer")
    pre = (config.get("pre_tokenizer") or {}).get("type")
    model = (config.get("model") or {}).get("type")
    added = [t.get("content", "") for t in config.get("added_tokens") or []]
    return (
        normalizer == "BertNormalizer"
        and pre == "BertPreTokenizer"
        and model == "WordPiece"
        and not any(QUOTE in t for t in added)
    )


class AnswerTokens:
    """Counts tokens of answer text: `count(texts)` one number per text (no special tokens:
    the text is read inside a larger context, not as an input of its own)."""

    def __init__(self, tokenizer: Any = None, *, key: str, by_pieces: bool = False):
        self._tokenizer = tokenizer
        self.key = key
        self.by_pieces = by_pieces  # cut at quotes, each piece counted once (module docstring)
        self._held: OrderedDict[str, int] = OrderedDict()
        self._held_bytes = 0
        self._lock = threading.Lock()
        self._quote = self._encoded([QUOTE])[0] if by_pieces else 0

    @classmethod
    def from_folder(cls, folder: str | Path | None) -> AnswerTokens:
        path = Path(folder) / "tokenizer.json" if folder else None
        if path is None or not path.is_file():
            return cls(key=f"estimate: 1 token per {FALLBACK_CHARS} characters")
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path))
        tok.no_padding()
        tok.no_truncation()
        return cls(tok, key=str(path), by_pieces=cuts_at_quotes(tok))

    def count(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        if self._tokenizer is None:
            return [-(-len(t) // FALLBACK_CHARS) for t in texts]
        if not self.by_pieces:
            return self._encoded(texts)
        cut = [t.split(QUOTE) for t in texts]
        wanted = dict.fromkeys(piece for pieces in cut for piece in pieces if piece)  # in order
        with self._lock:
            known = {piece: self._held[piece] for piece in wanted if piece in self._held}
            for piece in known:
                self._held.move_to_end(piece)
        new = [piece for piece in wanted if piece not in known]
        known.update(zip(new, self._encoded(new), strict=True))
        with self._lock:
            for piece in new:
                self._hold(piece, known[piece])
        return [sum(known[p] for p in pieces if p) + (len(pieces) - 1) * self._quote for pieces in cut]

    def total(self, text: str) -> int:
        return self.count([text])[0]

    def _encoded(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        encoded = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in encoded]

    def _hold(self, piece: str, count: int) -> None:
        if piece in self._held or len(piece) > PIECES_HELD // 64:  # a huge piece: not kept
            return
        self._held[piece] = count
        self._held_bytes += len(piece) + PIECE_BYTES
        while self._held_bytes > PIECES_HELD:
            gone, _ = self._held.popitem(last=False)
            self._held_bytes -= len(gone) + PIECE_BYTES


@functools.lru_cache(maxsize=4)
def answer_tokens(folder: str | None) -> AnswerTokens:
    """The counter for the model folder `folder` (the service's `local_model_path`), loaded
    once per folder."""
    counter = AnswerTokens.from_folder(folder)
    log.debug("answers are counted by %s", counter.key)
    return counter


def tokens_of(service: Configured) -> AnswerTokens:
    settings = getattr(service, "settings", None)
    return answer_tokens(getattr(settings, "local_model_path", None))
