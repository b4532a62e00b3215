"""Sizes a newcomer can read: no module in `src/fathom` over 640 read lines, no class over 400,
no function over 64.

A *read line* is what a reader takes in whatever the formatter did: each statement's first line,
each comment line, and each line of a string that spans lines (docstrings). The lines a formatter
adds when it puts one argument per line are not counted, so `ruff format` changes no size. (The
caps were 800, 500 and 80 physical lines before the tree was formatted; a statement there took
1.25 physical lines on average, hence these.)

Measured with `ast` and `tokenize`: a class or function spans from its first decorator to its last
line; a function defined inside another counts inside its parent (the parent is what a reader must
hold in mind), while a method is measured on its own. Generated or data files may be exempt by
file name, each with its reason (`EXEMPT`); code never is.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "fathom"

MAX_FILE, MAX_CLASS, MAX_FUNCTION = 640, 400, 64

# path relative to src/fathom -> why it may be longer (generated or data files only).
EXEMPT: dict[str, str] = {}

_SKIPPED = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def read_lines(text: str) -> set[int]:
    """The numbers of the lines a reader reads (see the module's docstring)."""
    read: set[int] = set()
    starts_statement = True
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.NEWLINE:
            starts_statement = True
        if tok.type in _SKIPPED:
            continue
        if tok.type == tokenize.COMMENT:
            read.add(tok.start[0])
            continue
        if starts_statement:
            read.add(tok.start[0])
            starts_statement = False
        if tok.type == tokenize.STRING and tok.end[0] > tok.start[0]:
            read.update(range(tok.start[0], tok.end[0] + 1))
    return read


def oversized(path: Path, rel: str) -> list[str]:
    """Every limit this module breaks, one line each."""
    text = path.read_text(encoding="utf-8")
    read = sorted(read_lines(text))
    found = []
    if len(read) > MAX_FILE:
        found.append(f"{rel}: {len(read)} read lines (file limit {MAX_FILE})")

    def size(node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> int:
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        return sum(1 for line in read if first <= line <= (node.end_lineno or node.lineno))

    def visit(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = f"{owner}{child.name}"
                if size(child) > MAX_CLASS:
                    found.append(
                        f"{rel}:{child.lineno} class {name}: {size(child)} read lines (limit {MAX_CLASS})"
                    )
                visit(child, name + ".")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                # Whatever is nested inside counts in this function's size: not visited apart.
                if size(child) > MAX_FUNCTION:
                    found.append(
                        f"{rel}:{child.lineno} def {owner}{child.name}: {size(child)} read lines "
                        f"(limit {MAX_FUNCTION})"
                    )
            else:
                visit(child, owner)

    visit(ast.parse(text, str(path)), "")
    return found


def test_the_measure_counts_nested_functions_inside_their_parent(tmp_path):
    inner = "\n".join(f"            x{i} = {i}" for i in range(35))
    outer = "\n".join(f"        y{i} = {i}" for i in range(35))
    module = tmp_path / "m.py"
    module.write_text(
        f"class C:\n    def outer(self):\n        def inner():\n{inner}\n{outer}\n"
        f"\n    @staticmethod\n    def short():\n        pass\n",
        encoding="utf-8",
    )
    # outer: its own line, inner's 36 and its 35; neither inner nor short is measured apart.
    assert oversized(module, "m.py") == ["m.py:2 def C.outer: 72 read lines (limit 64)"]


def test_the_measure_reads_statements_comments_and_docstrings_not_a_formatters_wrapping(tmp_path):
    wrapped = ",\n".join(f"        a{i}={i}" for i in range(30))
    module = tmp_path / "m.py"
    module.write_text(
        f'def f():\n    """One.\n\n    Three.\n    """\n    # a comment\n    return g(\n{wrapped},\n    )\n',
        encoding="utf-8",
    )
    # def, the docstring's four lines, the comment and the call's first line: 7 of 38.
    assert len(read_lines(module.read_text())) == 7
    assert oversized(module, "m.py") == []


def test_no_module_class_or_function_is_too_long():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel not in EXEMPT:
            found.extend(oversized(path, rel))
    assert found == [], "\n".join(found)


def test_every_exemption_names_a_file_that_exists():
    assert [rel for rel in EXEMPT if not (SRC / rel).is_file()] == []
