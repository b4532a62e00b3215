"""Sizes a newcomer can read: no module in `src/fathom` over 800 lines, no class over 500, no
function over 80.

Measured with `ast`: a class or function spans from its first decorator to its last line; a
function defined inside another counts inside its parent (the parent is what a reader must hold
in mind), while a method is measured on its own. Generated or data files may be exempt by file
name, each with its reason (`EXEMPT`); code never is.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "fathom"

MAX_FILE, MAX_CLASS, MAX_FUNCTION = 800, 500, 80

# path relative to src/fathom -> why it may be longer (generated or data files only).
EXEMPT: dict[str, str] = {}


def _span(node: ast.AST) -> int:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return node.end_lineno - first + 1


def oversized(path: Path, rel: str) -> list[str]:
    """Every limit this module breaks, one line each."""
    text = path.read_text(encoding="utf-8")
    found = []
    lines = len(text.splitlines())
    if lines > MAX_FILE:
        found.append(f"{rel}: {lines} lines (file limit {MAX_FILE})")

    def visit(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = f"{owner}{child.name}"
                if _span(child) > MAX_CLASS:
                    found.append(f"{rel}:{child.lineno} class {name}: {_span(child)} lines (limit {MAX_CLASS})")
                visit(child, name + ".")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                # Whatever is nested inside counts in this function's span: not visited apart.
                if _span(child) > MAX_FUNCTION:
                    found.append(f"{rel}:{child.lineno} def {owner}{child.name}: {_span(child)} lines "
                                 f"(limit {MAX_FUNCTION})")
            else:
                visit(child, owner)

    visit(ast.parse(text, str(path)), "")
    return found


def test_the_measure_counts_nested_functions_inside_their_parent(tmp_path):
    inner = "\n".join(f"            x{i} = {i}" for i in range(45))
    outer = "\n".join(f"        y{i} = {i}" for i in range(45))
    module = tmp_path / "m.py"
    module.write_text(f"class C:\n    def outer(self):\n        def inner():\n{inner}\n{outer}\n"
                      f"\n    @staticmethod\n    def short():\n        pass\n", encoding="utf-8")
    # outer: its own line, inner's 46 and its 45; neither inner nor short is measured apart.
    assert oversized(module, "m.py") == ["m.py:2 def C.outer: 92 lines (limit 80)"]


def test_no_module_class_or_function_is_too_long():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel not in EXEMPT:
            found.extend(oversized(path, rel))
    assert found == [], "\n".join(found)


def test_every_exemption_names_a_file_that_exists():
    assert [rel for rel in EXEMPT if not (SRC / rel).is_file()] == []
