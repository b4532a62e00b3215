"""What the code chunker needs to know about one language (`Spec`), and the small pure
functions over tree-sitter nodes every language's table uses (a node's text, its `name`
field, the row it really ends on).

It owns the shape of a language's entry, not the entries: code languages are `grammars`'s,
config and data formats `structured`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tree_sitter import Node

    from fathom.index.chunkers.pieces import Piece


@dataclass(frozen=True)
class Spec:
    """What a definition is in one grammar, and how to name it."""

    grammar: Callable[[], object] | None
    definitions: frozenset[str]
    containers: frozenset[str]  # definitions whose members are chunked on their own when big
    # Containers whose members are always chunked on their own: a namespace or module often
    # wraps a whole file, and one chunk named after it would hide every symbol inside.
    scopes: frozenset[str] = frozenset()
    wrappers: frozenset[str] = frozenset()  # decorators, export, template<...>: hold one definition
    transparent: frozenset[str] = frozenset()  # #ifdef, extern "C": their children are siblings
    attached: frozenset[str] = frozenset({"comment"})  # leading comments belong to the next def
    namer: Callable[[Node], str | None] | None = None
    docstrings: bool = False
    # The field of a container that holds its members; None: the container's own children
    # (a Ruby class, a Kotlin class whose `class_body` is unnamed, a TOML table).
    members: str | None = "body"
    # A further test a node of a `definitions` type must pass (`const f = () => …` is a
    # definition, `const n = 1` is not; a config key is one only when its value spans lines).
    accepts: Callable[[Node], bool] | None = None
    # What a definition is for the kind filter, given whether it sits in a class-like type;
    # None: `grammars.symbol_kind`, the table over every grammar's node types.
    kind_of: Callable[[Node, bool], str | None] | None = None
    # Containers whose functions are methods though the container is no class (a Ruby module).
    method_hosts: frozenset[str] = frozenset()
    # A format simple enough to cut by its lines, with no grammar (a Dockerfile): the pieces
    # of a file's lines. `grammar` is None then, and the tables above are unused.
    lines: Callable[[list[str]], list[Piece]] | None = None


def node_text(node: Node | None) -> str:
    return node.text.decode("utf-8", "replace") if node is not None and node.text is not None else ""


def name_field(node: Node) -> str | None:
    name = node.child_by_field_name("name")
    return node_text(name) or None if name is not None else None


def end_row(node: Node) -> int:
    # A node that ends at column 0 ends with the newline of the row before.
    end = node.end_point
    return max(node.start_point.row, end.row - 1 if end.column == 0 else end.row)


def spans_lines(node: Node) -> bool:
    """Whether a node runs over more than one row (a one-line key says too little alone)."""
    return end_row(node) > node.start_point.row


def first_descendant(node: Node, kind: str) -> Node | None:
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type == kind:
            return current
        stack.extend(reversed(current.named_children))
    return None


def first_child(node: Node, kinds: tuple[str, ...] | frozenset[str]) -> Node | None:
    for child in node.named_children:
        if child.type in kinds:
            return child
    return None


def unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        return text[1:-1]
    return text


def grammar(module: str, attr: str = "language") -> Callable[[], object]:
    """A loader of one grammar wheel's language (imported on first use only)."""

    def load() -> object:
        import importlib

        return getattr(importlib.import_module(module), attr)()

    return load
