"""The per-language tables of the code chunker: for each tree-sitter grammar, which nodes are
definitions, containers, scopes, wrappers and transparent, how a definition is named, and the
symbol kinds (function, method, class) a chunk carries. Data and small pure functions over
nodes; the walk over a tree is `code`'s. Config and data formats (JSON, YAML, TOML, HCL, SQL,
Dockerfile) have their tables in `structured`, merged into `SPECS` here.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING

from fathom.index.chunkers.spec import (
    Spec,
    end_row,
    first_child,
    first_descendant,
    grammar,
    name_field,
    node_text,
)
from fathom.index.chunkers.structured import STRUCTURED_SPECS

if TYPE_CHECKING:
    from tree_sitter import Node

__all__ = ["NEEDS_BODY", "SPECS", "SYMBOL_KINDS", "Spec", "end_row", "name_field", "symbol_kind"]


def _js_name(node: Node) -> str | None:
    if node.type in ("lexical_declaration", "variable_declaration"):
        for declarator in node.named_children:
            if declarator.type == "variable_declarator":
                return name_field(declarator)
        return None
    if node.type == "expression_statement":
        assignment = node.named_children[0] if node.named_children else None
        if assignment is not None and assignment.type == "assignment_expression":
            return node_text(assignment.child_by_field_name("left")) or None
        return None
    return name_field(node)


_FUNCTION_VALUES = frozenset(
    {
        "arrow_function",
        "function_expression",
        "function",
        "generator_function",
        "class",
    }
)


def js_is_definition(node: Node) -> bool:
    """`const f = () => ...` and `X.prototype.f = function ...` define functions too."""
    if node.type in ("lexical_declaration", "variable_declaration"):
        declarators = [c for c in node.named_children if c.type == "variable_declarator"]
        return (
            len(declarators) == 1
            and _type_of(declarators[0].child_by_field_name("value")) in _FUNCTION_VALUES
        )
    if node.type == "expression_statement":
        inner = node.named_children[0] if node.named_children else None
        return (
            inner is not None
            and inner.type == "assignment_expression"
            and _type_of(inner.child_by_field_name("right")) in _FUNCTION_VALUES
        )
    return True


def js_accepts(node: Node) -> bool:
    if node.type == "expression_statement":
        inner = node.named_children[0] if node.named_children else None
        if inner is not None and inner.type in ("internal_module", "module"):
            return False  # a namespace: `code` unwraps it as a wrapper
    return js_is_definition(node)


def _type_of(node: Node | None) -> str | None:
    return node.type if node is not None else None


def _go_name(node: Node) -> str | None:
    if node.type == "method_declaration":
        receiver = node.child_by_field_name("receiver")
        owner = first_descendant(receiver, "type_identifier") if receiver is not None else None
        name = name_field(node)
        return f"{node_text(owner)}.{name}" if owner is not None and name else name
    if node.type == "type_declaration":
        for spec in node.named_children:
            if spec.type in ("type_spec", "type_alias"):
                return name_field(spec)
        return None
    return name_field(node)


def _rust_name(node: Node) -> str | None:
    if node.type == "impl_item":
        target = node.child_by_field_name("type")
        return re.sub(r"<.*", "", node_text(target)).strip() or None
    return name_field(node)


def _c_name(node: Node) -> str | None:
    if node.type in ("function_definition", "type_definition"):
        declarator = node.child_by_field_name("declarator")
        # Unwrap pointer/function/reference declarators down to the name itself.
        for _ in range(16):
            if declarator is None:
                return None
            if declarator.type in (
                "identifier",
                "field_identifier",
                "type_identifier",
                "qualified_identifier",
                "destructor_name",
                "operator_name",
                "operator_cast",
                "template_function",
            ):
                return node_text(declarator).replace("::", ".") or None
            declarator = declarator.child_by_field_name("declarator") or (
                declarator.named_children[0] if declarator.named_children else None
            )
        return None
    return name_field(node)


def _dotted_name(node: Node) -> str | None:
    """The `name` field with a language's own separators (`A::B`, `App\\Mail`, `T:m`) as dots,
    the way every symbol is qualified here."""
    name = name_field(node)
    if name is None:
        return None
    return re.sub(r"::|\\|:", ".", name).strip(".") or None


# Definitions some grammars leave unnamed, by the name the language gives them.
_IMPLICIT_NAMES = {
    "companion_object": "Companion",
    "init_declaration": "init",
    "deinit_declaration": "deinit",
    "secondary_constructor": "constructor",
    "subscript_declaration": "subscript",
}


def _named_or_implicit(node: Node) -> str | None:
    return _dotted_name(node) or _IMPLICIT_NAMES.get(node.type)


def _swift_name(node: Node) -> str | None:
    name = node.child_by_field_name("name")  # the first of several `name` fields
    if name is None:
        return _IMPLICIT_NAMES.get(node.type)
    return re.sub(r"<.*", "", node_text(name)).strip() or None


_LUA_ASSIGNMENTS = ("variable_declaration", "assignment_statement")


def _lua_assignment(node: Node) -> tuple[Node, Node] | None:
    """The `name = function … end` a Lua assignment holds, as (names, values), else None."""
    assignment = first_child(node, ("assignment_statement",)) if node.type == "variable_declaration" else node
    if assignment is None:
        return None
    names = first_child(assignment, ("variable_list",))
    values = first_child(assignment, ("expression_list",))
    if names is None or values is None:
        return None
    return names, values


def _lua_accepts(node: Node) -> bool:
    """`local f = function … end` and `M.f = function … end` define functions too."""
    if node.type not in _LUA_ASSIGNMENTS:
        return True
    found = _lua_assignment(node)
    if found is None:
        return False
    names, values = found
    return (
        len(names.named_children) == 1
        and len(values.named_children) == 1
        and values.named_children[0].type == "function_definition"
    )


def _lua_name(node: Node) -> str | None:
    if node.type in _LUA_ASSIGNMENTS:
        found = _lua_assignment(node)
        return node_text(found[0]).replace(":", ".") or None if found is not None else None
    return _dotted_name(node)


def _lua_kind(node: Node, in_type: bool = False) -> str | None:
    # Lua's classes are tables: `function Queue:push()` and `Queue.new = function` are methods.
    name = _lua_name(node) or ""
    return "method" if in_type or "." in name else "function"


# --- symbol kinds ----------------------------------------------------------------------

# What a definition is, for the searches' symbol-kind filter: one table over every grammar's
# node types. A function defined inside a class-like type is a method.
SYMBOL_KINDS = ("function", "method", "class")
_CLASS_NODES = frozenset(
    {
        "class_definition",
        "class_declaration",
        "class",
        "abstract_class_declaration",
        "interface_declaration",
        "enum_declaration",
        "record_declaration",
        "annotation_type_declaration",
        "struct_item",
        "enum_item",
        "union_item",
        "trait_item",
        "impl_item",
        "class_specifier",
        "struct_specifier",
        "union_specifier",
        "enum_specifier",
        "type_definition",
        "type_declaration",
        # C#, PHP, Kotlin, Swift, Scala.
        "struct_declaration",
        "record_struct_declaration",
        "trait_declaration",
        "object_declaration",
        "companion_object",
        "protocol_declaration",
        "trait_definition",
        "object_definition",
        "enum_definition",
    }
)
_METHOD_NODES = frozenset(
    {
        "method_definition",
        "method_declaration",
        "constructor_declaration",
        "compact_constructor_declaration",
        "abstract_method_signature",
        # C#, Ruby (`def self.x`), Kotlin, Swift.
        "destructor_declaration",
        "operator_declaration",
        "conversion_operator_declaration",
        "singleton_method",
        "secondary_constructor",
        "init_declaration",
        "deinit_declaration",
        "protocol_function_declaration",
    }
)
_FUNCTION_NODES = frozenset(
    {
        "function_definition",
        "function_declaration",
        "generator_function_declaration",
        "function_item",
        "function_signature_item",
        "function_signature",
        "method",  # Ruby's `def`: a method inside a class or module, a function at the top
    }
)


def symbol_kind(node: Node, in_type: bool = False) -> str | None:
    """ "function", "method", "class" or None (a namespace, a macro, a type alias...)."""
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


_JS_DEFS = frozenset(
    {
        "function_declaration",
        "generator_function_declaration",
        "class_declaration",
        "method_definition",
        "lexical_declaration",
        "variable_declaration",
        "expression_statement",
        "class",
    }
)
_TS_DEFS = _JS_DEFS | {
    "abstract_class_declaration",
    "interface_declaration",
    "enum_declaration",
    "type_alias_declaration",
    "internal_module",
    "module",
    "function_signature",
    "abstract_method_signature",
}
_C_TRANSPARENT = frozenset(
    {
        "preproc_ifdef",
        "preproc_if",
        "preproc_else",
        "preproc_elif",
        "preproc_elifdef",
    }
)

SPECS: dict[str, Spec] = {
    "python": Spec(
        grammar=grammar("tree_sitter_python"),
        definitions=frozenset({"function_definition", "class_definition"}),
        containers=frozenset({"class_definition"}),
        wrappers=frozenset({"decorated_definition"}),
        docstrings=True,
    ),
    "javascript": Spec(
        grammar=grammar("tree_sitter_javascript"),
        definitions=_JS_DEFS,
        containers=frozenset({"class_declaration", "class"}),
        wrappers=frozenset({"export_statement"}),
        namer=_js_name,
        accepts=js_accepts,
    ),
    "typescript": Spec(
        grammar=grammar("tree_sitter_typescript", "language_typescript"),
        definitions=_TS_DEFS,
        containers=frozenset(
            {
                "class_declaration",
                "abstract_class_declaration",
                "class",
                "internal_module",
                "module",
                "interface_declaration",
            }
        ),
        scopes=frozenset({"internal_module", "module"}),
        wrappers=frozenset({"export_statement", "ambient_declaration"}),
        namer=_js_name,
        accepts=js_accepts,
    ),
    "go": Spec(
        grammar=grammar("tree_sitter_go"),
        definitions=frozenset({"function_declaration", "method_declaration", "type_declaration"}),
        containers=frozenset(),
        namer=_go_name,
    ),
    "rust": Spec(
        grammar=grammar("tree_sitter_rust"),
        definitions=frozenset(
            {
                "function_item",
                "function_signature_item",
                "struct_item",
                "enum_item",
                "union_item",
                "trait_item",
                "impl_item",
                "mod_item",
                "macro_definition",
            }
        ),
        containers=frozenset({"trait_item", "impl_item", "mod_item"}),
        scopes=frozenset({"mod_item"}),
        attached=frozenset({"line_comment", "block_comment", "attribute_item"}),
        namer=_rust_name,
    ),
    "java": Spec(
        grammar=grammar("tree_sitter_java"),
        definitions=frozenset(
            {
                "class_declaration",
                "interface_declaration",
                "enum_declaration",
                "record_declaration",
                "annotation_type_declaration",
                "method_declaration",
                "constructor_declaration",
                "compact_constructor_declaration",
            }
        ),
        containers=frozenset(
            {
                "class_declaration",
                "interface_declaration",
                "enum_declaration",
                "record_declaration",
                "annotation_type_declaration",
            }
        ),
        transparent=frozenset({"enum_body_declarations"}),
        attached=frozenset({"line_comment", "block_comment"}),
    ),
    "c": Spec(
        grammar=grammar("tree_sitter_c"),
        definitions=frozenset(
            {
                "function_definition",
                "struct_specifier",
                "union_specifier",
                "enum_specifier",
                "type_definition",
            }
        ),
        containers=frozenset(),
        transparent=_C_TRANSPARENT,
        namer=_c_name,
    ),
    "cpp": Spec(
        grammar=grammar("tree_sitter_cpp"),
        definitions=frozenset(
            {
                "function_definition",
                "class_specifier",
                "struct_specifier",
                "union_specifier",
                "enum_specifier",
                "type_definition",
                "namespace_definition",
            }
        ),
        containers=frozenset(
            {"class_specifier", "struct_specifier", "union_specifier", "namespace_definition"}
        ),
        scopes=frozenset({"namespace_definition"}),
        wrappers=frozenset({"template_declaration"}),
        transparent=_C_TRANSPARENT | {"linkage_specification", "declaration_list"},
        namer=_c_name,
    ),
}
SPECS["tsx"] = replace(SPECS["typescript"], grammar=grammar("tree_sitter_typescript", "language_tsx"))
SPECS.update(
    {
        "csharp": Spec(
            grammar=grammar("tree_sitter_c_sharp"),
            definitions=frozenset(
                {
                    "class_declaration",
                    "struct_declaration",
                    "interface_declaration",
                    "enum_declaration",
                    "record_declaration",
                    "record_struct_declaration",
                    "namespace_declaration",
                    "method_declaration",
                    "constructor_declaration",
                    "destructor_declaration",
                    "operator_declaration",
                    "conversion_operator_declaration",
                }
            ),
            containers=frozenset(
                {
                    "class_declaration",
                    "struct_declaration",
                    "interface_declaration",
                    "record_declaration",
                    "record_struct_declaration",
                    "namespace_declaration",
                }
            ),
            scopes=frozenset({"namespace_declaration"}),
            transparent=frozenset({"preproc_if", "preproc_elif", "preproc_else", "preproc_region"}),
            namer=_dotted_name,
        ),
        "ruby": Spec(
            grammar=grammar("tree_sitter_ruby"),
            definitions=frozenset({"class", "module", "method", "singleton_method"}),
            containers=frozenset({"class", "module"}),
            scopes=frozenset({"module"}),
            # A class's comment, body and methods are its own children, not a `body` field's.
            members=None,
            transparent=frozenset({"body_statement"}),
            namer=_dotted_name,
            method_hosts=frozenset({"module"}),
        ),
        "php": Spec(
            grammar=grammar("tree_sitter_php", "language_php"),
            definitions=frozenset(
                {
                    "class_declaration",
                    "interface_declaration",
                    "trait_declaration",
                    "enum_declaration",
                    "method_declaration",
                    "function_definition",
                    "namespace_definition",
                }
            ),
            containers=frozenset(
                {
                    "class_declaration",
                    "interface_declaration",
                    "trait_declaration",
                    "enum_declaration",
                    "namespace_definition",
                }
            ),
            scopes=frozenset({"namespace_definition"}),
            namer=_dotted_name,
        ),
        "kotlin": Spec(
            grammar=grammar("tree_sitter_kotlin"),
            definitions=frozenset(
                {
                    "class_declaration",
                    "object_declaration",
                    "companion_object",
                    "function_declaration",
                    "secondary_constructor",
                }
            ),
            containers=frozenset({"class_declaration", "object_declaration", "companion_object"}),
            members=None,
            transparent=frozenset({"class_body", "enum_class_body"}),
            attached=frozenset({"line_comment", "block_comment"}),
            namer=_named_or_implicit,
        ),
        "swift": Spec(
            grammar=grammar("tree_sitter_swift"),
            definitions=frozenset(
                {
                    "class_declaration",
                    "protocol_declaration",
                    "function_declaration",
                    "protocol_function_declaration",
                    "init_declaration",
                    "deinit_declaration",
                    "subscript_declaration",
                }
            ),
            containers=frozenset({"class_declaration", "protocol_declaration"}),
            attached=frozenset({"comment", "multiline_comment"}),
            namer=_swift_name,
        ),
        "scala": Spec(
            grammar=grammar("tree_sitter_scala"),
            definitions=frozenset(
                {
                    "class_definition",
                    "trait_definition",
                    "object_definition",
                    "enum_definition",
                    "function_definition",
                    "function_declaration",
                }
            ),
            containers=frozenset(
                {"class_definition", "trait_definition", "object_definition", "enum_definition"}
            ),
            attached=frozenset({"comment", "block_comment"}),
        ),
        "lua": Spec(
            grammar=grammar("tree_sitter_lua"),
            definitions=frozenset({"function_declaration", *_LUA_ASSIGNMENTS}),
            containers=frozenset(),
            namer=_lua_name,
            accepts=_lua_accepts,
            kind_of=_lua_kind,
        ),
        "shell": Spec(
            grammar=grammar("tree_sitter_bash"),
            definitions=frozenset({"function_definition"}),
            containers=frozenset(),
        ),
    }
)
SPECS.update(STRUCTURED_SPECS)
# Types that only count as definitions when they carry a body (a forward declaration
# `struct S;` or `typedef int T;` is one line of context, not a unit of meaning).
NEEDS_BODY = frozenset(
    {
        "struct_specifier",
        "union_specifier",
        "enum_specifier",
        "class_specifier",
        "namespace_definition",  # PHP's `namespace App;` names the file's namespace, holds nothing
    }
)
