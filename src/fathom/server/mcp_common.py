"""What every MCP tool of the server shares: the project and `max_tokens` parameters and the
error contract.

`tool_errors` turns an anticipated failure (a `FathomError`, or a full disk or a lost database
that `failure_of` names) into the SDK's `ToolError`, whose message names the fix; anything
else stays a bug. The retrieval tools (`mcp_tools`) and the agent tools (`mcp_agents`) both
use it, so neither module imports the other's internals.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Annotated, ParamSpec, TypeVar

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from fathom.errors import FathomError, failure_of
from fathom.server.answer_tokens import MAX_MAX_TOKENS, MIN_MAX_TOKENS

P = ParamSpec("P")
R = TypeVar("R")

# Described for the model that reads the tool list, in few words: the schema beside each
# description already gives its type, default and bounds, and every host sends the list to
# the model with each request.
ProjectOpt = Annotated[
    str | None, Field(description="A project as list_projects names it; null: every project.")
]
ProjectName = Annotated[
    str, Field(description="The project, as list_projects names it.", min_length=1, max_length=200)
]
MaxTokens = Annotated[
    int, Field(description="The answer's most tokens.", ge=MIN_MAX_TOKENS, le=MAX_MAX_TOKENS)
]
PageCursor = Annotated[
    str | None,
    Field(description="An answer's `next_cursor`: its next page (same other arguments).", max_length=200),
]


def tool_errors(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """A `FathomError` is anticipated: its message (which names the fix) goes to the client."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except FathomError as exc:
            raise ToolError(str(exc)) from exc
        except Exception as exc:
            failure = failure_of(exc)  # a full disk, a lost database: anticipated, named
            if failure is None:
                raise
            raise ToolError(str(failure)) from exc

    return wrapper
