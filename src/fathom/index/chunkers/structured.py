"""The tables of config and data formats, chunked by the same walk as code: a JSON, YAML or
TOML key, a TOML table, a Terraform/HCL block and a SQL schema statement are definitions, named
the way their users name them (`services.web`, `tool.ruff.lint`, `aws_instance.web`,
`public.orders`); a Dockerfile is cut at its `FROM` lines into build stages.

What counts: a key only when its value runs over several lines (a one-line `name: shop` is
context for its neighbours, and they join as one gap); a SQL statement only when it defines
or alters a schema object (an `INSERT` per row would make a chunk per row). A big key, table
or block is cut into its own keys and blocks by the walk, like a class into its methods.

Refuses: to give these units a symbol kind. Kinds are function, method and class; a table,
key or resource is none of them (a SQL function is a function).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from fathom.index.chunkers.pieces import Piece
from fathom.index.chunkers.spec import (
    Spec,
    first_child,
    grammar,
    node_text,
    spans_lines,
    unquote,
)

if TYPE_CHECKING:
    from tree_sitter import Node


def _no_kind(node: Node, in_type: bool = False) -> str | None:
    return None


# --- JSON and YAML: a key whose value is a block ---------------------------------------


def _key_name(node: Node) -> str | None:
    key = node.child_by_field_name("key")
    return unquote(node_text(key)) or None if key is not None else None


_JSON = Spec(
    grammar=grammar("tree_sitter_json"),
    definitions=frozenset({"pair"}),
    containers=frozenset({"pair"}),
    members="value",
    transparent=frozenset({"object"}),
    namer=_key_name,
    accepts=spans_lines,
    kind_of=_no_kind,
)
_YAML = Spec(
    grammar=grammar("tree_sitter_yaml"),
    definitions=frozenset({"block_mapping_pair"}),
    containers=frozenset({"block_mapping_pair"}),
    members="value",
    # Every document of a stream (`---`) is read as one: its keys are the units.
    transparent=frozenset({"document", "block_node", "block_mapping"}),
    namer=_key_name,
    accepts=spans_lines,
    kind_of=_no_kind,
)


# --- TOML: tables, and keys whose value runs over lines --------------------------------

_TOML_KEYS = ("bare_key", "dotted_key", "quoted_key")


def _toml_name(node: Node) -> str | None:
    key = first_child(node, _TOML_KEYS)
    if key is None:
        return None
    # `[tool."ruff".lint]` nests dotted keys: its bare and quoted keys, in order, are the path.
    parts, stack = [], [key]
    while stack:
        current = stack.pop()
        if current.type == "dotted_key":
            stack.extend(reversed(current.named_children))
        else:
            parts.append(unquote(node_text(current)))
    return ".".join(parts) or None


def _toml_accepts(node: Node) -> bool:
    return node.type != "pair" or spans_lines(node)


_TOML = Spec(
    grammar=grammar("tree_sitter_toml"),
    definitions=frozenset({"table", "table_array_element", "pair"}),
    containers=frozenset({"table", "table_array_element"}),
    members=None,  # a table's keys are its own children
    namer=_toml_name,
    accepts=_toml_accepts,
    kind_of=_no_kind,
)


# --- Terraform and HCL: blocks, named by their Terraform address -----------------------


def _hcl_name(node: Node) -> str | None:
    if node.type == "attribute":
        return node_text(first_child(node, ("identifier",))) or None
    parts = []
    for child in node.named_children:
        if child.type == "identifier":
            parts.append(node_text(child))
        elif child.type == "string_lit":
            parts.append(unquote(node_text(child)))
        elif child.type == "block_start":
            break
    if not parts:
        return None
    # How Terraform itself addresses them: `aws_instance.web`, `var.region`, `data.x.y`.
    if parts[0] == "resource" and len(parts) > 1:
        parts = parts[1:]
    elif parts[0] == "variable":
        parts[0] = "var"
    return ".".join(parts)


def _hcl_accepts(node: Node) -> bool:
    return node.type == "block" or spans_lines(node)


_HCL = Spec(
    grammar=grammar("tree_sitter_hcl"),
    definitions=frozenset({"block", "attribute"}),
    containers=frozenset({"block"}),
    members=None,  # identifier, labels, `{`, body, `}`: the body is transparent
    transparent=frozenset({"body"}),
    namer=_hcl_name,
    accepts=_hcl_accepts,
    kind_of=_no_kind,
)


# --- SQL: statements that define or change a schema object -----------------------------


def _sql_object(node: Node) -> Node | None:
    inner = node.named_children[0] if node.named_children else None
    if inner is None or not inner.type.startswith(("create_", "alter_")):
        return None
    return inner


def _sql_name(node: Node) -> str | None:
    inner = _sql_object(node)
    if inner is None:
        return None
    # An index is named before its table: `CREATE INDEX by_customer ON orders (…)`.
    kinds = (
        ("identifier", "object_reference")
        if inner.type == "create_index"
        else ("object_reference", "identifier")
    )
    for kind in kinds:
        found = first_child(inner, (kind,))
        if found is not None:
            return ".".join(unquote(p) for p in node_text(found).split(".")) or None
    return None


def _sql_kind(node: Node, in_type: bool = False) -> str | None:
    inner = _sql_object(node)
    return "function" if inner is not None and inner.type in ("create_function", "create_procedure") else None


def _sql_defines(node: Node) -> bool:
    return _sql_object(node) is not None


_SQL = Spec(
    grammar=grammar("tree_sitter_sql"),
    definitions=frozenset({"statement"}),
    containers=frozenset(),
    transparent=frozenset({"transaction", "block"}),
    attached=frozenset({"comment", "marginalia"}),
    namer=_sql_name,
    accepts=_sql_defines,
    kind_of=_sql_kind,
)


# --- Dockerfile: build stages, cut at `FROM` -------------------------------------------

# `FROM [--platform=…] image [AS name]`; instructions are case-insensitive.
_FROM = re.compile(r"^\s*from\s+(?:--\S+\s+)*(\S+)(?:\s+as\s+(\S+))?", re.IGNORECASE)
# A heredoc (`RUN python - <<'PY'`, `COPY <<-EOF /etc/x`): its lines are a script's, not
# instructions, and a Python script's `from x import y` is no stage.
_HEREDOC = re.compile(r"<<(-?)([\"']?)([A-Za-z_][A-Za-z0-9_]*)\2")


def dockerfile_stages(lines: list[str]) -> list[Piece]:
    """One piece per build stage, from its `FROM` line to the next stage's, named by the
    stage's name (`AS builder`) or else its image; what comes before the first `FROM`
    (`ARG`s, the syntax directive) is a gap. Only an instruction starts a stage: not a line
    continued from the one before (a trailing backslash), nor a line of a heredoc.

    No grammar package: the only Dockerfile grammar wheel (0.2.0, 2023) loads through an API
    tree-sitter deprecates, and stages need only this one line rule."""
    starts: list[tuple[int, str]] = []
    continued = False
    heredocs: list[tuple[bool, str]] = []  # (indented `<<-`, terminator), in the order opened
    for row, line in enumerate(lines):
        if heredocs:
            dash, word = heredocs[0]
            if (line.strip() if dash else line.rstrip()) == word:
                heredocs.pop(0)
            continue
        match = None if continued else _FROM.match(line)
        if match is not None:
            starts.append((row, match.group(2) or match.group(1)))
        stripped = line.rstrip()
        heredocs.extend((m.group(1) == "-", m.group(3)) for m in _HEREDOC.finditer(line))
        continued = stripped.endswith("\\") or (
            continued and (not stripped or stripped.lstrip().startswith("#"))
        )
    # The comments right above a `FROM` say what that stage is for: they open it.
    starts = [(_comments_above(lines, row), name) for row, name in starts]
    pieces: list[Piece] = []
    first = starts[0][0] if starts else len(lines)
    if first > 0:
        pieces.append(Piece(0, first - 1, None, "gap"))
    for index, (row, name) in enumerate(starts):
        end = starts[index + 1][0] - 1 if index + 1 < len(starts) else len(lines) - 1
        pieces.append(Piece(row, end, name, "def"))
    return pieces


def _comments_above(lines: list[str], row: int) -> int:
    while row > 0 and lines[row - 1].lstrip().startswith("#"):
        row -= 1
    return row


_DOCKERFILE = Spec(grammar=None, definitions=frozenset(), containers=frozenset(), lines=dockerfile_stages)

STRUCTURED_SPECS: dict[str, Spec] = {
    "json": _JSON,
    "yaml": _YAML,
    "toml": _TOML,
    "terraform": _HCL,
    "hcl": _HCL,
    "sql": _SQL,
    "dockerfile": _DOCKERFILE,
}
