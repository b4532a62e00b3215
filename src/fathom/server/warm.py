"""A tool call that comes while the encoder is still loading waits for it, and says so.

`fathom mcp`, `fathom serve` and `fathom server` start loading the in-process encoder when they
start (`Fathom.warm_up`). `wait_for_encoder` wraps an MCP server's `call_tool`, as
`mcp_http.ToolAccess` does, so every tool, present and future, passes it: a call that needs the
encoder while the load is under way first tells the client why it waits — a progress
notification when the client sent a progress token (the MCP way to say "still working"), else
nothing on the wire — and logs the same line, then waits for that one load to end.

It refuses to know what a tool does beyond whether it needs the encoder at all: the tools that
only read the index's records (`ENCODER_FREE`) answer at once; any other, added later too,
waits (the safe side).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fathom.service.ports import Warming

log = logging.getLogger("fathom.server.warm")

ENCODER_FREE = frozenset({"list_projects", "index_status", "drop_project"})


def wait_for_encoder(server: Any, fathom: Warming) -> None:
    """Make `server`'s tool calls wait for `fathom`'s encoder warm-up where they need it."""
    inner = server.call_tool

    async def call_tool(name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        warmup = getattr(fathom, "warmup", None)
        if warmup is not None and not warmup.ready and name not in ENCODER_FREE:

            async def notice(text: str) -> None:
                log.warning("%s: %s", name, text)
                with contextlib.suppress(Exception):  # no request context, or the client left
                    await context.report_progress(0, None, text)

            await warmup.wait(notice)
        return await inner(name, arguments, context)

    server.call_tool = call_tool
