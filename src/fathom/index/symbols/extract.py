"""A file's symbols from its tree-sitter parse: the definitions (name, qualified name, kind,
signature, lines) and every identifier occurrence (where a name is used, what encloses it, and
whether it is a call, an import or a mention).

It reads the same trees the code chunker cuts chunks from, with the chunker's own rules of
what a definition is and how it is named (`chunkers.code`, `chunkers.grammars`): a symbol
`find_symbol` returns is the symbol a search hit names. Unlike the chunker, it walks the whole
tree (a function nested in a function is a definition too, qualified by its host).

It refuses languages without a grammar (config and data formats, prose) and does no I/O: the
text comes from the caller (the symbol table assembles it from the index).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fathom.index.chunkers.code import definition_of, parser
from fathom.index.chunkers.grammars import SPECS, Spec, symbol_kind
from fathom.index.chunkers.limits import MAX_DEPTH
from fathom.index.chunkers.spec import end_row, name_field, node_text
from fathom.index.chunkers.structured import STRUCTURED_SPECS
from fathom.index.symbols.imports import Binding, bindings_of, receiver_of

if TYPE_CHECKING:
    from tree_sitter import Node

# Languages whose definitions are code symbols: every grammar of the chunker but the config and
# data formats (a YAML key is not a symbol) and the formats cut by their lines.
LANGUAGES = frozenset(
    name for name, spec in SPECS.items() if spec.grammar is not None and name not in STRUCTURED_SPECS
)

# The ways a reference is used, best first: `find_references` ranks by this order.
USES = ("call", "import", "mention")

# Leaf node types that are a name in some grammar.
_NAME_LEAVES = frozenset(
    {
        "identifier",
        "field_identifier",
        "type_identifier",
        "property_identifier",
        "shorthand_property_identifier",
        "shorthand_property_identifier_pattern",
        "private_property_identifier",
        "namespace_identifier",
        "package_identifier",
        "simple_identifier",
        "constant",
        "name",
        "variable_name",
    }
)
# Nodes that call something, and the fields that may hold what they call, in order.
_CALLS = frozenset(
    {
        "call",
        "call_expression",
        "method_invocation",
        "invocation_expression",
        "function_call_expression",
        "member_call_expression",
        "scoped_call_expression",
        "nullsafe_member_call_expression",
        "object_creation_expression",
        "new_expression",
        "function_call",
        "command",
        "macro_invocation",
        "method_call",
        "instance_expression",
    }
)
# A callee with type arguments (`new List<int>()`, `parse::<T>()`): what it calls is its name.
_GENERIC = frozenset({"generic_name", "generic_type", "generic_function"})
_CALLEE_FIELDS = ("function", "method", "name", "constructor", "macro", "type")
_IMPORTS = frozenset(
    {
        "import_statement",
        "import_from_statement",
        "future_import_statement",
        "import_declaration",
        "import_spec",
        "use_declaration",
        "using_directive",
        "namespace_use_declaration",
        "import",
        "import_header",
        "preproc_include",
        "extern_crate_declaration",
    }
)
# Definitions a grammar's kind table leaves unnamed, by what they are.
_OTHER_KINDS = {
    "namespace_definition": "module",
    "namespace_declaration": "module",
    "module": "module",
    "internal_module": "module",
    "mod_item": "module",
    "type_alias_declaration": "type",
    "macro_definition": "macro",
}
MAX_SIGNATURE = 300


@dataclass(frozen=True)
class Definition:
    name: str  # the last part of the qualified name: what `find_symbol` matches first
    qualname: str  # `Class.method`, dotted in every language
    kind: str  # function, method, class, module, type, macro or other
    signature: str  # the definition's head, on one line: `async def send(self, request) -> Response`
    start_line: int  # 1-based, inclusive
    end_line: int
    parent: str | None  # the qualified name of the definition it sits in
    depth: int  # 0 at the top of the file


@dataclass(frozen=True)
class Occurrence:
    name: str
    line: int  # 1-based
    column: int  # 0-based, in characters
    use: str  # one of USES
    enclosing: str | None  # the qualified name of the innermost definition holding it
    # What the name is reached through: `self` in `self.send`, `httpx` in `httpx.get`, the
    # text of any other expression (`self._transport`); None for a bare name.
    receiver: str | None = None


@dataclass(frozen=True)
class FileSymbols:
    definitions: list[Definition]
    occurrences: list[Occurrence]
    bindings: list[Binding] = field(default_factory=list)


def extract(text: str, language: str) -> FileSymbols:
    """The definitions and identifier occurrences of one file's text in `language`."""
    if language not in LANGUAGES:
        return FileSymbols([], [])
    spec = SPECS[language]
    source = text.encode("utf-8", "surrogatepass")
    root = parser(language).parse(source).root_node
    definitions: list[Definition] = []
    occurrences: list[Occurrence] = []
    named_at: set[int] = set()  # start bytes of the names of definitions: not references
    imports: list[Node] = []  # the outermost node of each import statement
    lines = text.split("\n")
    # (node, enclosing qualified name, in a class-like type, inside an import, definition
    # depth, the span of the definition just entered: a node of the same span is that one
    # definition seen again, as Lua's `local f = function` is a declaration holding an
    # assignment that both define `f`)
    Entry = tuple["Node", str | None, bool, bool, int, tuple[int, int] | None]
    stack: list[Entry] = [(root, None, False, False, 0, None)]
    while stack:
        node, scope, in_type, in_import, depth, entered = stack.pop()
        span = (node.start_byte, node.end_byte)
        found = _definition(spec, node) if depth < MAX_DEPTH and span != entered else None
        if not in_import and node.type in _IMPORTS:
            imports.append(node)  # at any depth: a function's own imports bind names too
            in_import = True
        if found is None:
            if _is_name(node) and node.start_byte not in named_at:
                occurrences.append(_occurrence(node, scope, in_import, lines))
            stack.extend((c, scope, in_type, in_import, depth, None) for c in reversed(node.named_children))
            continue
        name = (spec.namer or name_field)(found) or "<anonymous>"
        qualname = f"{scope}.{name}" if scope else name
        kind = (spec.kind_of or symbol_kind)(found, in_type) or _OTHER_KINDS.get(found.type, "other")
        short = name.rsplit(".", 1)[-1]
        site = _name_site(found, short)
        if site is not None:
            named_at.add(site)
        definitions.append(
            Definition(
                name=short,
                qualname=qualname,
                kind=kind,
                signature=_signature(found),
                start_line=found.start_point.row + 1,
                end_line=end_row(found) + 1,
                parent=scope,
                depth=depth,
            )
        )
        inner = (
            qualname,
            kind == "class" or found.type in spec.method_hosts,
            in_import,
            depth + 1,
            (found.start_byte, found.end_byte),
        )
        stack.extend((c, *inner) for c in reversed(found.named_children))
        if found != node:  # a wrapper's own parts (a decorator, `export`): the scope around it
            stack.extend(
                (c, scope, in_type, in_import, depth, None)
                for c in reversed(node.named_children)
                if (c.start_byte, c.end_byte) != (found.start_byte, found.end_byte)
            )
    definitions.sort(key=lambda d: (d.start_line, d.depth))
    return FileSymbols(
        definitions, sorted(occurrences, key=lambda o: (o.line, o.column)), bindings_of(imports, language)
    )


def _definition(spec: Spec, node: Node) -> Node | None:
    if node.type not in spec.definitions and node.type not in spec.wrappers:
        return None
    return definition_of(spec, node)


def _is_name(node: Node) -> bool:
    if node.named_child_count:
        return False
    if node.type in _NAME_LEAVES:
        return True
    # Shell: a command's name, not each of its arguments.
    return node.type == "word" and node.parent is not None and node.parent.type == "command_name"


def _name_site(definition: Node, short: str) -> int | None:
    """The start byte of the name a definition is introduced by: the first name leaf with
    that text, outside its body."""
    body = definition.child_by_field_name("body")
    stack = [definition]
    while stack:
        node = stack.pop()
        if body is not None and node.start_byte == body.start_byte and node.type == body.type:
            continue
        if node.named_child_count == 0:
            if node_text(node) == short and (node.type in _NAME_LEAVES or node.type == "word"):
                return int(node.start_byte)
            continue
        stack.extend(reversed(node.named_children))
    return None


def _occurrence(node: Node, scope: str | None, in_import: bool, lines: list[str]) -> Occurrence:
    row, byte_column = node.start_point
    line = lines[row] if row < len(lines) else ""
    column = len(line.encode("utf-8", "surrogatepass")[:byte_column].decode("utf-8", "replace"))
    use = "import" if in_import else ("call" if _is_called(node) else "mention")
    return Occurrence(node_text(node), row + 1, column, use, scope, None if in_import else receiver_of(node))


def _is_called(node: Node) -> bool:
    """Whether the name is what a call calls: the callee of the nearest call above it, and
    its last part (`self.send(…)` calls `send`, not `self`)."""
    current = node.parent
    for _ in range(5):
        if current is None:
            return False
        if current.type in _CALLS:
            callee = next(
                (c for f in _CALLEE_FIELDS if (c := current.child_by_field_name(f)) is not None), None
            )
            if callee is None and current.named_children:
                callee = current.named_children[0]
            while callee is not None and callee.type in _GENERIC and callee.named_children:
                callee = callee.child_by_field_name("function") or callee.named_children[0]
            return (
                callee is not None
                and callee.start_byte <= node.start_byte
                and callee.end_byte == node.end_byte
            )
        current = current.parent
    return False


def _signature(definition: Node) -> str:
    """The definition's head: its text up to its body, on one line."""
    body = definition.child_by_field_name("body")
    raw = definition.text or b""
    if body is not None and body.start_byte > definition.start_byte:
        raw = raw[: body.start_byte - definition.start_byte]
    else:
        raw = raw.split(b"\n", 1)[0]
    head = re.sub(r"\s+", " ", raw.decode("utf-8", "replace")).strip()
    head = head.rstrip("{:= ").rstrip() or head
    return head if len(head) <= MAX_SIGNATURE else head[: MAX_SIGNATURE - 1] + "…"
