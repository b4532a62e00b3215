"""The per-language tables of the code chunker: for each tree-sitter grammar, which nodes are
definitions, containers, scopes, wrappers and transparent, how a definition is named, and the
symbol kinds (function, method, class) a chunk carries. Data and small pure functions over
nodes; the walk over a tree is `code`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Spec:
    """What a definition is in one grammar, and how to name it."""

    grammar: Callable[[], object]
    definitions: frozenset[str]
    containers: frozenset[str]  # definitions whose members are chunked on their own when big
    # Containers whose members are always chunked on their own: a namespace or module often
    # wraps a whole file, and one chunk named after it would hide every symbol inside.
    scopes: frozenset[str] = frozenset()
    wrappers: frozenset[str] = frozenset()  # decorators, export, template<...>: hold one definition
    transparent: frozenset[str] = frozenset()  # #ifdef, extern "C": their children are siblings
    attached: frozenset[str] = frozenset({"comment"})  # leading comments belong to the next def
    namer: Callable[[object], str | None] | None = None
    docstrings: bool = False


def _text(node) -> str:
    return node.text.decode("utf-8", "replace") if node is not None and node.text is not None else ""


def name_field(node) -> str | None:
    name = node.child_by_field_name("name")
    return _text(name) or None if name is not None else None


def end_row(node) -> int:
    # A node that ends at column 0 ends with the newline of the row before.
    end = node.end_point
    return max(node.start_point.row, end.row - 1 if end.column == 0 else end.row)


def _js_name(node) -> str | None:
    if node.type in ("lexical_declaration", "variable_declaration"):
        for declarator in node.named_children:
            if declarator.type == "variable_declarator":
                return name_field(declarator)
        return None
    if node.type == "expression_statement":
        assignment = node.named_children[0] if node.named_children else None
        if assignment is not None and assignment.type == "assignment_expression":
            return _text(assignment.child_by_field_name("left")) or None
        return None
    return name_field(node)


_FUNCTION_VALUES = frozenset({
    "arrow_function", "function_expression", "function", "generator_function", "class",
})


def js_is_definition(node) -> bool:
    """`const f = () => ...` and `X.prototype.f = function ...` define functions too."""
    if node.type in ("lexical_declaration", "variable_declaration"):
        declarators = [c for c in node.named_children if c.type == "variable_declarator"]
        return len(declarators) == 1 and _type_of(declarators[0].child_by_field_name("value")) in _FUNCTION_VALUES
    if node.type == "expression_statement":
        inner = node.named_children[0] if node.named_children else None
        return (
            inner is not None
            and inner.type == "assignment_expression"
            and _type_of(inner.child_by_field_name("right")) in _FUNCTION_VALUES
        )
    return True


def _type_of(node) -> str | None:
    return node.type if node is not None else None


def _go_name(node) -> str | None:
    if node.type == "method_declaration":
        receiver = node.child_by_field_name("receiver")
        owner = _first_descendant(receiver, "type_identifier") if receiver is not None else None
        name = name_field(node)
        return f"{_text(owner)}.{name}" if owner is not None and name else name
    if node.type == "type_declaration":
        for spec in node.named_children:
            if spec.type in ("type_spec", "type_alias"):
                return name_field(spec)
        return None
    return name_field(node)


def _rust_name(node) -> str | None:
    if node.type == "impl_item":
        target = node.child_by_field_name("type")
        return re.sub(r"<.*", "", _text(target)).strip() or None
    return name_field(node)


def _c_name(node) -> str | None:
    if node.type in ("function_definition", "type_definition"):
        declarator = node.child_by_field_name("declarator")
        # Unwrap pointer/function/reference declarators down to the name itself.
        for _ in range(16):
            if declarator is None:
                return None
            if declarator.type in (
                "identifier", "field_identifier", "type_identifier", "qualified_identifier",
                "destructor_name", "operator_name", "operator_cast", "template_function",
            ):
                return _text(declarator).replace("::", ".") or None
            declarator = declarator.child_by_field_name("declarator") or (
                declarator.named_children[0] if declarator.named_children else None
            )
        return None
    return name_field(node)


def _first_descendant(node, kind: str):
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type == kind:
            return current
        stack.extend(reversed(current.named_children))
    return None


# --- symbol kinds ----------------------------------------------------------------------

# What a definition is, for the searches' symbol-kind filter: one table over every grammar's
# node types. A function defined inside a class-like type is a method.
SYMBOL_KINDS = ("function", "method", "class")
_CLASS_NODES = frozenset({
    "class_definition", "class_declaration", "class", "abstract_class_declaration",
    "interface_declaration", "enum_declaration", "record_declaration",
    "annotation_type_declaration", "struct_item", "enum_item", "union_item", "trait_item",
    "impl_item", "class_specifier", "struct_specifier", "union_specifier", "enum_specifier",
    "type_definition", "type_declaration",
})
_METHOD_NODES = frozenset({
    "method_definition", "method_declaration", "constructor_declaration",
    "compact_constructor_declaration", "abstract_method_signature",
})
_FUNCTION_NODES = frozenset({
    "function_definition", "function_declaration", "generator_function_declaration",
    "function_item", "function_signature_item", "function_signature",
})


def symbol_kind(node, in_type: bool = False) -> str | None:
    """"function", "method", "class" or None (a namespace, a macro, a type alias...)."""
    kind = node.type
    if kind in ("lexical_declaration", "variable_declaration", "expression_statement"):
        # `const f = () => …` defines a function; `const C = class …` a class.
        value = None
        if kind == "expression_statement":
            inner = node.named_children[0] if node.named_children else None
            value = inner.child_by_field_name("right") if inner is not None else None
        else:
            declarators = [c for c in node.named_children if c.type == "variable_declarator"]
            value = declarators[0].child_by_field_name("value") if declarators else None
        if value is None or value.type not in _FUNCTION_VALUES:
            return None
        return "class" if value.type == "class" else ("method" if in_type else "function")
    if kind in _CLASS_NODES:
        return "class"
    if kind in _METHOD_NODES:
        return "method"
    if kind in _FUNCTION_NODES:
        return "method" if in_type else "function"
    return None


def _grammar(module: str, attr: str = "language") -> Callable[[], object]:
    def load():
        import importlib

        return getattr(importlib.import_module(module), attr)()

    return load


_JS_DEFS = frozenset({
    "function_declaration", "generator_function_declaration", "class_declaration",
    "method_definition", "lexical_declaration", "variable_declaration", "expression_statement",
    "class",
})
_TS_DEFS = _JS_DEFS | {
    "abstract_class_declaration", "interface_declaration", "enum_declaration",
    "type_alias_declaration", "internal_module", "module", "function_signature",
    "abstract_method_signature",
}
_C_TRANSPARENT = frozenset({
    "preproc_ifdef", "preproc_if", "preproc_else", "preproc_elif", "preproc_elifdef",
})

SPECS: dict[str, Spec] = {
    "python": Spec(
        grammar=_grammar("tree_sitter_python"),
        definitions=frozenset({"function_definition", "class_definition"}),
        containers=frozenset({"class_definition"}),
        wrappers=frozenset({"decorated_definition"}),
        docstrings=True,
    ),
    "javascript": Spec(
        grammar=_grammar("tree_sitter_javascript"),
        definitions=_JS_DEFS,
        containers=frozenset({"class_declaration", "class"}),
        wrappers=frozenset({"export_statement"}),
        namer=_js_name,
    ),
    "typescript": Spec(
        grammar=_grammar("tree_sitter_typescript", "language_typescript"),
        definitions=_TS_DEFS,
        containers=frozenset({
            "class_declaration", "abstract_class_declaration", "class", "internal_module",
            "module", "interface_declaration",
        }),
        scopes=frozenset({"internal_module", "module"}),
        wrappers=frozenset({"export_statement", "ambient_declaration"}),
        namer=_js_name,
    ),
    "go": Spec(
        grammar=_grammar("tree_sitter_go"),
        definitions=frozenset({"function_declaration", "method_declaration", "type_declaration"}),
        containers=frozenset(),
        namer=_go_name,
    ),
    "rust": Spec(
        grammar=_grammar("tree_sitter_rust"),
        definitions=frozenset({
            "function_item", "function_signature_item", "struct_item", "enum_item", "union_item",
            "trait_item", "impl_item", "mod_item", "macro_definition",
        }),
        containers=frozenset({"trait_item", "impl_item", "mod_item"}),
        scopes=frozenset({"mod_item"}),
        attached=frozenset({"line_comment", "block_comment", "attribute_item"}),
        namer=_rust_name,
    ),
    "java": Spec(
        grammar=_grammar("tree_sitter_java"),
        definitions=frozenset({
            "class_declaration", "interface_declaration", "enum_declaration", "record_declaration",
            "annotation_type_declaration", "method_declaration", "constructor_declaration",
            "compact_constructor_declaration",
        }),
        containers=frozenset({
            "class_declaration", "interface_declaration", "enum_declaration", "record_declaration",
            "annotation_type_declaration",
        }),
        transparent=frozenset({"enum_body_declarations"}),
        attached=frozenset({"line_comment", "block_comment"}),
    ),
    "c": Spec(
        grammar=_grammar("tree_sitter_c"),
        definitions=frozenset({
            "function_definition", "struct_specifier", "union_specifier", "enum_specifier",
            "type_definition",
        }),
        containers=frozenset(),
        transparent=_C_TRANSPARENT,
        namer=_c_name,
    ),
    "cpp": Spec(
        grammar=_grammar("tree_sitter_cpp"),
        definitions=frozenset({
            "function_definition", "class_specifier", "struct_specifier", "union_specifier",
            "enum_specifier", "type_definition", "namespace_definition",
        }),
        containers=frozenset({"class_specifier", "struct_specifier", "union_specifier", "namespace_definition"}),
        scopes=frozenset({"namespace_definition"}),
        wrappers=frozenset({"template_declaration"}),
        transparent=_C_TRANSPARENT | {"linkage_specification", "declaration_list"},
        namer=_c_name,
    ),
}
SPECS["tsx"] = replace(SPECS["typescript"], grammar=_grammar("tree_sitter_typescript", "language_tsx"))
# Types that only count as definitions when they carry a body (a forward declaration
# `struct S;` or `typedef int T;` is one line of context, not a unit of meaning).
NEEDS_BODY = frozenset({"struct_specifier", "union_specifier", "enum_specifier", "class_specifier"})
