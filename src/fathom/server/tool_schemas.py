"""How the tool list reads on the wire: the schemas `tools/list` gives, made compact.

An agent's host sends every tool's name, description and input schema to the model, and
transfers (and some hosts count) the whole list, output schemas included. Pydantic's schemas
carry what no reader needs: a `title` on every property and model, `default` values in a
result's schema.

What it owns: `compact_tool`, the one rewrite of a listed tool. Input schemas lose only the
generated titles, `"default": null` (an argument outside `required` may be left out) and
`"additionalProperties": true` (the rule anyway); descriptions, other defaults and bounds
stay: they are how a model calls the tool right. Output schemas also lose their defaults and
their field descriptions (hosts keep output schemas from the model: what a result's fields
and scores mean is docs/architecture.md's, Search), and a tool answering another's shape
(`SAME_RESULT`: `search_docs`, `find_similar`) lists none: its description says "answers as
search_code". A read-only tool's annotations drop the two hints MCP reads only on a tool
that writes (`destructiveHint`, `idempotentHint`).

What it refuses to do: change what a tool accepts or answers. It rewrites the listed copy;
the SDK still checks calls and results against the tool's own schemas, and a compact schema
accepts exactly what the full one does (titles, defaults and descriptions constrain nothing).
Nor does it merge a nullable field's `anyOf` into a type list (`{"type": [T, "null"]}`): legal
JSON Schema, but a client that maps tool schemas onto a single-`type` dialect (the OpenAPI
subset of Gemini's function declarations) may reject the tool; the MCP Inspector's `--strict`
check flags it.
"""

from __future__ import annotations

from typing import Any

# The tools whose result schema keeps its field descriptions: none. Hosts keep output schemas
# from the model, so a result's field descriptions reach no model; what each field (each
# score) means is docs/architecture.md's (Search), and the names say the rest.
DESCRIBED_RESULTS: frozenset[str] = frozenset()
# Tools that answer another's result shape: their listing points there instead of repeating
# its schema (their description says so; the SDK still checks every result they give).
SAME_RESULT = {"search_docs": "search_code", "find_similar": "search_code"}


def compact_tool(tool: Any) -> Any:
    """A copy of the listed `tool` (an `mcp.types.Tool`) with compact schemas."""
    update: dict[str, Any] = {"input_schema": _compact(tool.input_schema, output=False, described=True)}
    hints = tool.annotations
    if hints is not None and hints.read_only_hint:
        # MCP: destructiveHint and idempotentHint are meaningful only when readOnlyHint is
        # false; a read-only tool's say nothing.
        update["annotations"] = hints.model_copy(update={"destructive_hint": None, "idempotent_hint": None})
    if tool.name in SAME_RESULT:
        update["output_schema"] = None
    elif tool.output_schema is not None:
        update["output_schema"] = _compact(
            tool.output_schema, output=True, described=tool.name in DESCRIBED_RESULTS
        )
    return tool.model_copy(update=update)


def _compact(schema: Any, *, output: bool, described: bool) -> Any:
    if isinstance(schema, list):
        return [_compact(s, output=output, described=described) for s in schema]
    if not isinstance(schema, dict):
        return schema
    dropped = {"title"} | ({"default"} if output else set()) | (set() if described else {"description"})
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("properties", "$defs") and isinstance(value, dict):
            # Names of fields and models, not schema keywords: a field called `title` stays.
            out[key] = {name: _compact(s, output=output, described=described) for name, s in value.items()}
        elif (
            key not in dropped
            and not (key == "default" and value is None)
            and not (key == "additionalProperties" and value is True)
        ):
            # A default of null says only that the argument may be left out, which its
            # absence from `required` already says; any property is allowed unless said.
            out[key] = _compact(value, output=output, described=described)
    return out
