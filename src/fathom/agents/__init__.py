"""The two LLM roles at work: `ask` (code-assistant) and `explore` (rlm).

`routes` is their one door to a provider (the router's choice, the budget's permits, the
fallback mode checked at the call); `tools` holds the read-only project tools confined to the
project root; `assistant` and `rlm` are the two front ends. Nothing here writes to the index
or to the project.
"""

from fathom.agents.routes import cloud_provider, fallback_status
from fathom.inference.calls import CloudForbidden, Served, call_role
from fathom.agents.tools import TOOL_SPECS, PathRefused, ProjectTools, Span, ToolError, ToolOutcome, find_spans
from fathom.agents.assistant import Answer, Citation, CodeAssistant, ContextBlock, ask
from fathom.agents.rlm import Exploration, ExploreUnavailable, Explorer, Limits, TraceStep, explore

__all__ = [
    "Answer", "Citation", "CloudForbidden", "CodeAssistant", "ContextBlock", "Exploration",
    "ExploreUnavailable", "Explorer", "Limits", "PathRefused", "ProjectTools", "Served", "Span",
    "TOOL_SPECS", "ToolError", "ToolOutcome", "TraceStep", "ask", "call_role", "cloud_provider",
    "explore", "fallback_status", "find_spans",
]
