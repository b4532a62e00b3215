"""The two LLM roles at work: `ask` (code-assistant) and `explore` (rlm).

`routes` is their one door to a provider (the router's choice, the budget's permits, the
fallback mode checked at the call); `tools` holds the read-only project tools confined to the
project root; `assistant` and `rlm` are the two front ends. Nothing here writes to the index
or to the project.

The names below load on first use: the CLI registers `fathom ask` / `explore` from
`agents.commands` on every start, and must not pay for the search stack to do so.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from fathom.agents.assistant import Answer, Citation, CodeAssistant, ContextBlock, ask
    from fathom.agents.rlm import Exploration, Explorer, ExploreUnavailable, Limits, TraceStep, explore
    from fathom.agents.routes import cloud_provider, fallback_status
    from fathom.agents.tools import (
        TOOL_SPECS,
        PathRefused,
        ProjectTools,
        Span,
        ToolError,
        ToolOutcome,
        find_spans,
    )
    from fathom.inference.router import CloudForbidden, Served, call_role

_HOMES = {
    "fathom.agents.routes": ("cloud_provider", "fallback_status"),
    "fathom.inference.router": ("CloudForbidden", "Served", "call_role"),
    "fathom.agents.tools": (
        "TOOL_SPECS",
        "PathRefused",
        "ProjectTools",
        "Span",
        "ToolError",
        "ToolOutcome",
        "find_spans",
    ),
    "fathom.agents.assistant": ("Answer", "Citation", "CodeAssistant", "ContextBlock", "ask"),
    "fathom.agents.rlm": ("Exploration", "ExploreUnavailable", "Explorer", "Limits", "TraceStep", "explore"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "Answer",
    "Citation",
    "CloudForbidden",
    "CodeAssistant",
    "ContextBlock",
    "Exploration",
    "ExploreUnavailable",
    "Explorer",
    "Limits",
    "PathRefused",
    "ProjectTools",
    "Served",
    "Span",
    "TOOL_SPECS",
    "ToolError",
    "ToolOutcome",
    "TraceStep",
    "ask",
    "call_role",
    "cloud_provider",
    "explore",
    "fallback_status",
    "find_spans",
]


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'fathom.agents' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later reads are plain attribute reads
    return value
