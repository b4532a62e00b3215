"""What a file's parse says about where its names come from: the names its imports bind (and
from which module), and what a used name is reached through (its receiver: `self` in
`self.send`, `httpx` in `httpx.get`).

It owns the per-language reading of import statements for the languages whose imports name a
module a file can be matched to (Python, JavaScript/TypeScript, Go); other languages' imports
stay what `extract` records of them (the names inside an import, with no module).

It refuses to resolve anything (`fathom.index.symbols.calls` does, over the whole project) and
does no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from fathom.index.chunkers.spec import node_text

# Nodes whose last part is a member reached through their first (`a.b`, `a->b`, `a::b`).
_MEMBERS = frozenset(
    {
        "attribute",
        "member_expression",
        "selector_expression",
        "field_expression",
        "scoped_identifier",
        "member_access_expression",
        "scoped_call_expression",
        "qualified_identifier",
        "dot_index_expression",
        "method_index_expression",
        "field_access",
        "scoped_type_identifier",
        "nullsafe_member_access_expression",
    }
)
# Calls that name their method and its object in fields of their own (Java, PHP, Ruby).
_OBJECT_FIELDS = ("object", "receiver", "scope")
MAX_RECEIVER = 200


@dataclass(frozen=True)
class Binding:
    """One name an import brings into a file: `local` is how the file writes it, `module`
    the module named (as written: `._models`, `./m`, `net/http`), `original` the name the
    module has for it (the module itself when the import binds a module)."""

    local: str
    module: str
    original: str


def receiver_of(node: Any) -> str | None:
    """The text of what `node` (a name leaf) is reached through, or None for a bare name."""
    parent = node.parent
    if parent is None:
        return None
    obj = None
    if parent.type == "navigation_suffix" and parent.parent is not None:  # Kotlin `a.b`
        obj = parent.parent.named_children[0] if parent.parent.named_children else None
    elif any(_same(parent.child_by_field_name(f), node) for f in ("name", "method")):
        obj = next((o for f in _OBJECT_FIELDS if (o := parent.child_by_field_name(f))), None)
    elif parent.type in _MEMBERS and parent.named_child_count >= 2 and _same(parent.named_children[-1], node):
        obj = parent.named_children[0]
    if obj is None or _same(obj, node):
        return None
    text = " ".join(node_text(obj).split())
    return text[:MAX_RECEIVER] or None


def _same(a: Any, b: Any) -> bool:
    return a is not None and (a.start_byte, a.end_byte) == (b.start_byte, b.end_byte)


def bindings_of(statements: list[Any], language: str) -> list[Binding]:
    """Every name these import statements (of a file in `language`) bind, with its module."""
    read = _READERS.get(language)
    if read is None:
        return []
    out: list[Binding] = []
    stack = list(reversed(statements))
    while stack:
        node = stack.pop()
        found = read(node)
        if found is not None:
            out.extend(Binding(*b) for b in found)
        elif node.type in ("import_declaration", "import_spec_list"):  # Go's groups
            stack.extend(reversed(node.named_children))
    return out


Found = list[tuple[str, str, str]] | None


def _python(node: Any) -> Found:
    if node.type == "import_statement":
        out = []
        for child in node.named_children:
            if child.type == "aliased_import":
                module = node_text(child.child_by_field_name("name"))
                out.append((node_text(child.child_by_field_name("alias")), module, module))
            elif child.type == "dotted_name":
                module = node_text(child)  # `import a.b` binds `a`
                out.append((module.split(".")[0], module, module))
        return out
    if node.type == "import_from_statement":
        module_node = node.child_by_field_name("module_name")
        module = node_text(module_node) if module_node is not None else ""
        out = []
        for child in node.named_children:
            if module_node is not None and _same(child, module_node):
                continue
            if child.type == "aliased_import":
                out.append(
                    (
                        node_text(child.child_by_field_name("alias")),
                        module,
                        node_text(child.child_by_field_name("name")),
                    )
                )
            elif child.type == "dotted_name":
                out.append((node_text(child).rsplit(".", 1)[-1], module, node_text(child)))
        return out
    return None


def _javascript(node: Any) -> Found:
    if node.type != "import_statement" or node.child_by_field_name("source") is None:
        return None
    module = node_text(node.child_by_field_name("source")).strip("'\"`")
    out = []
    for clause in (c for c in node.named_children if c.type == "import_clause"):
        for child in clause.named_children:
            if child.type == "identifier":
                out.append((node_text(child), module, "default"))
            elif child.type == "namespace_import" and child.named_children:
                out.append((node_text(child.named_children[-1]), module, module))
            elif child.type == "named_imports":
                for spec in (s for s in child.named_children if s.type == "import_specifier"):
                    name = node_text(spec.child_by_field_name("name"))
                    alias = spec.child_by_field_name("alias")
                    out.append((node_text(alias) if alias is not None else name, module, name))
    return out


def _go(node: Any) -> Found:
    if node.type != "import_spec" or node.child_by_field_name("path") is None:
        return None
    module = node_text(node.child_by_field_name("path")).strip('"`')
    alias = node.child_by_field_name("name")
    local = node_text(alias) if alias is not None else re.split(r"[/.]", module)[-1]
    return [] if local in ("_", ".") else [(local, module, module)]


# The languages whose imports are read module by module: elsewhere an import's names are all
# `extract` records of it.
_READERS = {
    "python": _python,
    "javascript": _javascript,
    "typescript": _javascript,
    "tsx": _javascript,
    "go": _go,
}
READ_LANGUAGES = frozenset(_READERS)
