"""A process that exchanges two entries of a folder in a loop, as an attacker races a reader:
`renameat2(RENAME_EXCHANGE)` swaps a real folder and a symbolic link atomically, so at every
instant one name is the folder and the other the link, and which is which keeps changing.

    with Swapper(root / "sub", root / "lnk", control=tmp / "swaps") as swapper:
        ...                      # read the tree; swapper.swaps counts the exchanges so far
    swapper.swaps                # the final count

The exchanges run in a child process (`python tests/index/swapper.py A B CONTROL SECONDS`, standard
library only) so they race the reader on another core instead of taking turns with it under
the GIL; the count and the stop flag are shared through a 16-byte file mapped by both. The
child stops when told, or after SECONDS whatever happens: it never outlives a test.
`exchanger()` says why the kernel or the filesystem refuses the exchange, for a clear skip.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

RENAME_EXCHANGE = 2
AT_FDCWD = -100
# renameat2's system call number where glibc (before 2.28) has no wrapper for it.
SYS_RENAMEAT2 = {"x86_64": 316, "amd64": 316, "aarch64": 276, "arm64": 276, "riscv64": 276}
_COUNT, _STOP = slice(0, 8), 8


def exchanger() -> Callable[[bytes, bytes], None]:
    """A function exchanging two paths atomically; `OSError` (with the kernel's errno) from it
    when the exchange fails, `OSError(ENOSYS)` here when there is no way to ask for one."""
    libc = ctypes.CDLL(None, use_errno=True)
    wrapper = getattr(libc, "renameat2", None)
    if wrapper is not None:
        wrapper.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]

        def call(a: bytes, b: bytes) -> int:
            return int(wrapper(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE))
    else:
        number = SYS_RENAMEAT2.get(platform.machine().lower())
        if number is None:
            raise OSError(
                38, f"no renameat2 in libc and no known system call number for {platform.machine()}"
            )

        def call(a: bytes, b: bytes) -> int:
            return int(libc.syscall(number, AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE))

    def exchange(a: bytes, b: bytes) -> None:
        if call(a, b) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    return exchange


class Swapper:
    """The child process exchanging `a` and `b` (see the module docstring)."""

    def __init__(self, a: Path, b: Path, *, control: Path, seconds: float = 60.0):
        self.a, self.b, self.control, self.seconds = a, b, control, seconds
        self._final: int | None = None

    def __enter__(self) -> Swapper:
        self.control.write_bytes(bytes(16))
        self._file = self.control.open("r+b")
        self._shared = mmap.mmap(self._file.fileno(), 16)
        self._child = subprocess.Popen(
            [sys.executable, __file__, str(self.a), str(self.b), str(self.control), str(self.seconds)],
            stderr=subprocess.PIPE,
        )
        return self

    @property
    def swaps(self) -> int:
        if self._final is not None:
            return self._final
        return int(struct.unpack("<q", self._shared[_COUNT])[0])

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._shared[_STOP] = 1
        try:
            _, err = self._child.communicate(timeout=30)
        finally:
            if self._child.poll() is None:
                self._child.kill()
                self._child.wait()
        self._final = self.swaps
        self._shared.close()
        self._file.close()
        if self._child.returncode != 0 and kind is None:
            raise AssertionError(
                f"the swapper failed ({self._child.returncode}): {err.decode(errors='replace')}"
            )


def main(argv: list[str]) -> int:
    a, b, control, seconds = os.fsencode(argv[0]), os.fsencode(argv[1]), argv[2], float(argv[3])
    exchange = exchanger()
    with open(control, "r+b") as fh:
        shared = mmap.mmap(fh.fileno(), 16)
    deadline = time.monotonic() + seconds
    swaps = 0
    while shared[_STOP] == 0 and time.monotonic() < deadline:
        for _ in range(64):
            exchange(a, b)
        swaps += 64
        shared[_COUNT] = struct.pack("<q", swaps)
    shared.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
