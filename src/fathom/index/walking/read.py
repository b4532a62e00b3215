"""The bounded read of one file: it trusts nothing on disk. Only a regular file is opened:
the check is made on the opened descriptor (`O_NONBLOCK | O_NOFOLLOW`, then `fstat`), so a
file swapped for a FIFO between the listing and the read cannot hang the walk; every read is
bounded in size and in time. A walk opens each file by its name relative to its folder's
descriptor (`dir_fd`, from `walking.tree`), never by a path whose folders would be resolved
again.

It refuses to follow a link and to decode: the bytes go back as bytes.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

from fathom.index.walking.reasons import SLOW, SPECIAL, SYMLINK, TOO_LARGE, UNREADABLE

MAX_FILE_BYTES = 1_000_000
MAX_IGNORE_BYTES = 1_000_000  # a .gitignore larger than this is not a .gitignore
READ_SECONDS = 10.0  # one file's read; a slower one (a dying disk, a stalled mount) is skipped


def lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


class Unreadable(Exception):
    """One file could not be read; `reason` is the skip reason it is counted under."""

    def __init__(self, reason: str):
        self.reason = reason


def read_regular(
    path: str | os.PathLike[str],
    max_bytes: int,
    *,
    dir_fd: int | None = None,
    seconds: float = READ_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> bytes:
    """The bytes of a regular file, read without trusting what the listing said about it.

    Opened non-blocking and without following a link, then checked on the descriptor: a FIFO,
    a socket or a device is refused (`SPECIAL`) before a single read could hang. More than
    `max_bytes` is `TOO_LARGE`; a read slower than `seconds` is `SLOW`. With `dir_fd`, `path`
    is a name in that folder (no folder on the way is resolved again)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        raise Unreadable(SYMLINK if exc.errno == errno.ELOOP else UNREADABLE) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable(SPECIAL)
        if info.st_size > max_bytes:
            raise Unreadable(TOO_LARGE)
        deadline = clock() + seconds
        parts: list[bytes] = []
        got = 0
        while True:
            part = os.read(fd, min(1 << 20, max_bytes + 1 - got))
            if not part:
                break
            parts.append(part)
            got += len(part)
            if got > max_bytes:
                raise Unreadable(TOO_LARGE)  # it grew while we read
            if clock() > deadline:
                raise Unreadable(SLOW)
        return b"".join(parts)
    except OSError:
        raise Unreadable(UNREADABLE) from None
    finally:
        os.close(fd)
