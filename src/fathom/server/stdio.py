"""The MCP stdio transport's input, read on the event loop so that a stop never waits on it.

What it owns: `loop_stdin()`, the lines of standard input for `fathom mcp`, read by the event
loop itself (a pipe transport) instead of a worker thread, and the claim on descriptor 0
while it is served (fd 0 points at the null device, so a child process such as git never
reads the host's messages, and is given back at the end).

Why: the SDK reads stdin with a blocking `readline()` in a worker thread that cancellation
cannot interrupt. On Ctrl-C or SIGTERM with the host's pipe still open, the session's task
group waited for that read forever (a host that never writes again), and the process never
exited. A read on the event loop is cancelled like any other await.

What it refuses to do: take over a stdin that is not a pipe, a socket or a terminal (a
regular file redirected in: the event loop cannot poll it). `loop_stdin()` then answers None,
and the SDK's own reader serves, which reaches the file's end by itself.

API:
    async with loop_stdin() as lines: ...   # lines: async iterable of str, or None
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import AsyncIterator

# One JSON-RPC message a line: a line longer than this is refused by the reader, not buffered
# without bound (the SDK's own reader has no bound at all).
MAX_LINE = 64 * 1024 * 1024


class _Lines:
    """stdin's lines, decoded as the SDK decodes them (UTF-8, bad bytes replaced)."""

    def __init__(self, reader: asyncio.StreamReader):
        self.reader = reader

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        line = await self.reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


def _pollable(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


@contextlib.asynccontextmanager
async def loop_stdin(fd: int = 0) -> AsyncIterator[_Lines | None]:
    """Standard input's lines read on the running loop, with fd `fd` pointed at the null
    device meanwhile; None (nothing claimed) when stdin cannot be read that way."""
    if not _pollable(fd):
        yield None
        return
    saved = os.dup(fd)  # what fd 0 was, given back at the end
    blocking = os.get_blocking(saved)  # shared with every copy (a terminal's shell too)
    private = os.dup(fd)
    os.set_inheritable(private, False)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    pipe = os.fdopen(private, "rb", buffering=0)
    transport = None
    try:
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
        yield _Lines(reader)
    finally:
        if transport is not None:
            transport.close()  # closes `pipe` too
        else:
            pipe.close()
        with contextlib.suppress(OSError):
            os.set_blocking(saved, blocking)
            os.dup2(saved, fd)
        os.close(saved)
