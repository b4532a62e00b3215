"""A canary secret the test process never holds whole: `Canary` keeps two halves and finds
"half one immediately followed by half two" in text, bytes and values; `POSTER` is the
script of a separate process that joins them only to send the key to the admin API.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

POSTER = """
import os, sys, httpx
r = httpx.post(sys.argv[1] + "/admin/key", json={"key": os.environ["K1"] + os.environ["K2"]},
               headers={"Authorization": "Bearer " + sys.argv[2]}, timeout=60)
print(r.status_code)
print(r.text)
"""


class Canary:
    def __init__(self, h1: str | None = None, h2: str | None = None) -> None:
        self.h1 = h1 or "sk-or-v1-" + secrets.token_hex(16)
        self.h2 = h2 or secrets.token_hex(16)
        self.b1, self.b2 = self.h1.encode(), self.h2.encode()

    @classmethod
    def from_file(cls, path: Path, prefix: int = 4, split: int = 20) -> Canary:
        """A secret kept in a file (a sidecar's credential), read as two halves that this
        process never joins. Its fixed prefix (`fsc_`) is left out, so the body of the secret
        is found even where the prefix was cut off (and the log scrubber would not know it)."""
        fd = os.open(path, os.O_RDONLY)
        try:
            os.read(fd, prefix)
            h1 = os.read(fd, split).decode()
            h2 = os.read(fd, 4096).decode().strip()
        finally:
            os.close(fd)
        assert h1 and h2
        return cls(h1, h2)

    def sha256(self) -> str:
        h = hashlib.sha256()
        h.update(self.b1)
        h.update(self.b2)
        return h.hexdigest()

    def in_text(self, s: str) -> bool:
        i = s.find(self.h1)
        while i >= 0:
            if s.startswith(self.h2, i + len(self.h1)):
                return True
            i = s.find(self.h1, i + 1)
        return False

    def in_bytes(self, b: bytes | bytearray | memoryview) -> bool:
        b = bytes(b) if isinstance(b, memoryview) else b
        i = b.find(self.b1)
        while i >= 0:
            if b.startswith(self.b2, i + len(self.b1)):
                return True
            i = b.find(self.b1, i + 1)
        return False

    def in_value(self, v: object) -> bool:
        if isinstance(v, str):
            return self.in_text(v)
        if isinstance(v, (bytes, bytearray, memoryview)):
            return self.in_bytes(v)
        return False
