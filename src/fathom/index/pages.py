"""Cursors: how a search answer too big for one reply goes on in the next.

What it owns: `Cursor`, the opaque string a paged answer ends with. It names the search it
continues (a digest of the search's arguments), where the next page starts (an offset into
the ranking) and the ranking it cut (a digest of the hits' ids, in order). A later call
with the same arguments and the cursor re-runs the search and serves from the offset, but
only if the ranking is the one the cursor cut: so across pages no hit is lost or repeated,
and when the index changed in between (a live sync) the caller is told to search again
instead of being served a page of a different ranking.

What it refuses to do: keep anything on the server (a cursor works across restarts and
servers of one index) or hide what a search found from the caller it was found for (the
search re-runs in the caller's own scope; a cursor carries digests, no project, path or
text).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fathom.errors import ConfigError

VERSION = 1


def digest(parts: Sequence[Any]) -> str:
    """A short digest of JSON-able `parts`: enough to tell two searches or rankings apart."""
    raw = json.dumps(list(parts), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True)
class Cursor:
    search: str  # digest of the search's arguments
    offset: int  # 0-based place in the ranking where the next page starts
    ranking: str  # digest of the ranking's hit ids, in order

    def encode(self) -> str:
        raw = json.dumps([VERSION, self.search, self.offset, self.ranking], separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, value: str) -> Cursor:
        try:
            raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
            version, search, offset, ranking = json.loads(raw)
            if version != VERSION or not isinstance(offset, int) or offset < 1:
                raise ValueError(value)
            return cls(str(search), offset, str(ranking))
        except (ValueError, TypeError, binascii.Error):
            raise ConfigError(
                f"{value[:60]!r} is not a cursor of this server: pass the "
                f"`next_cursor` of an answer unchanged, or search without a "
                f"cursor"
            ) from None

    def check(self, search: str, ranking: str, total: int) -> None:
        """Refuse a cursor given with other arguments than its search's, or for a ranking
        that changed since, or past its end."""
        if search != self.search:
            raise ConfigError(
                "this cursor continues another search: repeat the arguments "
                "of the call that gave it (query, project, k, filters), "
                "unchanged, or search without a cursor"
            )
        if ranking != self.ranking:
            raise ConfigError(
                "the results of this search changed since the cursor was "
                "given (the index was updated): search again without the "
                "cursor"
            )
        if self.offset >= total:
            raise ConfigError(
                f"this cursor is past the last of the search's {total} results: there is nothing more to read"
            )
