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

What it refuses to do: decide what goes into an answer (the tools fill their answers against
it) or truncate anything itself.
"""

from __future__ import annotations

import functools
import logging
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


class AnswerTokens:
    """Counts tokens of answer text: `count(texts)` one number per text (no special tokens:
    the text is read inside a larger context, not as an input of its own)."""

    def __init__(self, tokenizer: Any = None, *, key: str):
        self._tokenizer = tokenizer
        self.key = key

    @classmethod
    def from_folder(cls, folder: str | Path | None) -> AnswerTokens:
        path = Path(folder) / "tokenizer.json" if folder else None
        if path is None or not path.is_file():
            return cls(key=f"estimate: 1 token per {FALLBACK_CHARS} characters")
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path))
        tok.no_padding()
        tok.no_truncation()
        return cls(tok, key=str(path))

    def count(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        if self._tokenizer is None:
            return [-(-len(t) // FALLBACK_CHARS) for t in texts]
        encoded = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in encoded]

    def total(self, text: str) -> int:
        return self.count([text])[0]


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
