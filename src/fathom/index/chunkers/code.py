"""Syntax-aware chunking of code with tree-sitter (the official per-language grammar wheels,
which ship compiled grammars and work offline): definitions become pieces, big containers are
cut into their members, the code between definitions is kept as gaps, and Python docstrings
also go to the docs table. Config and data files go the same way, with keys, tables, blocks
and statements as their definitions (`structured`); a format cut by its lines (a Dockerfile)
gets its pieces from its `Spec` and skips the parse.

It refuses unbounded recursion: nesting deeper than `MAX_DEPTH` is one opaque unit.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import cache
from typing import TYPE_CHECKING

from fathom.index.chunk import Chunk
from fathom.index.chunkers.grammars import NEEDS_BODY, SPECS, symbol_kind
from fathom.index.chunkers.languages import DOCS
from fathom.index.chunkers.limits import MAX_DEPTH, TINY_CHARS
from fathom.index.chunkers.pieces import Doc, Piece, runs_of_content
from fathom.index.chunkers.spec import Spec, end_row, name_field

if TYPE_CHECKING:  # imported where used: the grammars load on first use
    from tree_sitter import Language, Node, Parser


@cache
def _language(language: str) -> Language:
    """One grammar per language per process: loading it is the slow part."""
    import tree_sitter

    load = SPECS[language].grammar
    if load is None:
        raise ValueError(f"{language} is cut by its lines: it has no grammar to load")
    return tree_sitter.Language(load())


_parsers = threading.local()


def _parser(language: str) -> Parser:
    # A Parser holds parse state and is not safe to share between threads (two index jobs
    # chunk in two worker threads), so each thread keeps its own, built once per language.
    cached: dict[str, Parser] | None = getattr(_parsers, "by_language", None)
    if cached is None:
        cached = _parsers.by_language = {}
    if language not in cached:
        import tree_sitter

        cached[language] = tree_sitter.Parser(_language(language))
    return cached[language]


def _is_definition(spec: Spec, node: Node) -> bool:
    if node.type not in spec.definitions:
        return False
    if spec.accepts is not None and not spec.accepts(node):
        return False
    if node.type in NEEDS_BODY:
        return node.child_by_field_name("body") is not None
    if node.type == "type_definition":
        kind = node.child_by_field_name("type")
        return kind is not None and kind.child_by_field_name("body") is not None
    return True


def _unwrap(spec: Spec, node: Node) -> Node | None:
    """The definition a node stands for (itself, or the one a wrapper holds), else None."""
    for _ in range(4):
        if _is_definition(spec, node):
            return node
        if node.type in spec.wrappers or (
            node.type == "expression_statement"
            and node.named_children
            and node.named_children[0].type in ("internal_module", "module")
        ):
            inner = node.child_by_field_name("definition") or node.child_by_field_name("declaration")
            if inner is None:
                candidates = [c for c in node.named_children if c.type not in spec.attached]
                inner = candidates[-1] if candidates else None
            if inner is None:
                return None
            node = inner
            continue
        return None
    return None


def _members(spec: Spec, node: Node, depth: int = 0) -> Iterator[Node]:
    """Children of a container's body, with transparent blocks (#ifdef) flattened."""
    body: Node | None = node
    if node.type in spec.containers and spec.members is not None:
        body = node.child_by_field_name(spec.members)
    if body is None:
        return
    for child in body.named_children:
        if child.type in spec.transparent and depth < MAX_DEPTH:
            yield from _members(spec, child, depth + 1)
            # A transparent block that also has a body field (extern "C" { ... }).
            inner = child.child_by_field_name("body")
            if inner is not None and inner.type not in spec.transparent:
                yield from _members(spec, inner, depth + 1)
        else:
            yield child


# The parse and the definition rules, public for the symbol table (`fathom.index.symbols`),
# which reads definitions from the same trees the chunks were cut from.
parser = _parser
definition_of = _unwrap


def chunk_code(doc: Doc, spec: Spec) -> list[Chunk]:
    if spec.lines is not None:
        return doc.emit(spec.lines(doc.lines))
    source = "\n".join(doc.lines).encode("utf-8", "surrogatepass")
    tree = _parser(doc.language).parse(source)
    pieces: list[Piece] = []
    _cover(doc, spec, tree.root_node, 0, len(doc.lines) - 1, None, pieces, 0)
    chunks = doc.emit(pieces)
    if spec.docstrings:
        # A docs chunk identical to a code chunk (a module that is only its docstring) would
        # share its chunk_id, which is unique per project across both tables.
        taken = {c.chunk_id for c in chunks}
        chunks.extend(c for c in _python_docstrings(doc, tree.root_node) if c.chunk_id not in taken)
    return chunks


def _cover(
    doc: Doc,
    spec: Spec,
    container: Node,
    lo: int,
    hi: int,
    scope: str | None,
    out: list[Piece],
    depth: int,
    in_type: bool = False,
) -> None:
    """Pieces for rows lo..hi of a container: one per definition, gaps for the rest.
    `in_type`: the container is a class-like type, so its functions are methods."""
    covered: list[tuple[int, int]] = []
    attach_from: int | None = None  # first row of the leading comments run, if any
    attach_end = -2
    for child in _members(spec, container):
        start, end = child.start_point.row, end_row(child)
        if child.type in spec.attached:
            if attach_from is None or start > attach_end + 1:
                attach_from = start
            attach_end = end
            continue
        definition = _unwrap(spec, child)
        if definition is None:
            attach_from = None
            continue
        if attach_from is not None and start <= attach_end + 1:
            start = attach_from
        attach_from = None
        start, end = max(start, lo), min(end, hi)
        if start > end:
            continue
        name = (spec.namer or name_field)(definition) or "<anonymous>"
        symbol = f"{scope}.{name}" if scope else name
        kind = (spec.kind_of or symbol_kind)(definition, in_type)
        covered.append((start, end))
        if depth >= MAX_DEPTH or (doc.fits(start, end) and definition.type not in spec.scopes):
            out.append(Piece(start, end, symbol, "def", kind))
        elif definition.type in spec.containers:
            _cover(
                doc,
                spec,
                definition,
                start,
                end,
                symbol,
                out,
                depth + 1,
                in_type=kind == "class" or definition.type in spec.method_hosts,
            )
        else:
            out.append(Piece(start, end, symbol, "def", kind))
    # Whatever no definition claimed (imports, constants, a class header, a closing brace)
    # is indexed too, under the container's symbol.
    row = lo
    for start, end in sorted(covered) + [(hi + 1, hi + 1)]:
        if start > row:
            for run_start, run_end in runs_of_content(doc, row, start - 1):
                out.append(Piece(run_start, run_end, scope, "gap"))
        row = max(row, end + 1)


def _python_docstrings(doc: Doc, root: Node) -> list[Chunk]:
    """Module, class and function docstrings, also as docs-table chunks (prose about code)."""
    found: list[tuple[int, int, str | None, str | None]] = []

    def first_string(block: Node | None) -> Node | None:
        statements = [c for c in block.named_children if c.type != "comment"] if block is not None else []
        if not statements:
            return None
        first = statements[0]
        if (
            first.type == "expression_statement"
            and first.named_children
            and first.named_children[0].type == "string"
        ):
            return first.named_children[0]
        return None

    def visit(node: Node, scope: str | None, depth: int, in_type: bool = False) -> None:
        if depth > MAX_DEPTH:
            return
        for child in node.named_children:
            target = (
                child.child_by_field_name("definition") if child.type == "decorated_definition" else child
            )
            if target is None or target.type not in ("function_definition", "class_definition"):
                continue
            name = name_field(target) or "<anonymous>"
            symbol = f"{scope}.{name}" if scope else name
            body = target.child_by_field_name("body")
            kind = symbol_kind(target, in_type)
            string = first_string(body)
            if string is not None:
                found.append((string.start_point.row, end_row(string), symbol, kind))
            if body is not None:
                visit(body, symbol, depth + 1, in_type=kind == "class")

    module_doc = first_string(root)
    if module_doc is not None:
        found.append((module_doc.start_point.row, end_row(module_doc), None, None))
    visit(root, None, 0)
    docs = Doc(path=doc.path, language=doc.language, table=DOCS, lines=doc.lines, limits=doc.limits)
    out: list[Chunk] = []
    for start, end, symbol, kind in sorted(found, key=lambda f: f[0]):
        if docs.solid(start, end) < TINY_CHARS:
            continue
        if docs.fits(start, end):
            out.append(docs.chunk(start, end, symbol, kind=kind))
        else:
            out.extend(docs.windows(start, end, symbol, docs.limits.max_lines, kind=kind))
    return out
