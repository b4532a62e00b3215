"""The package's modules and their imports, read with `ast`: the shared reading of the
whole-tree checks (tests/test_layers.py, tests/server/test_server_parts.py).

`modules` maps each dotted module name of `src/fathom` to its file; `imports` lists every
import of a fathom module (module level and inside functions, and under `if TYPE_CHECKING:`,
marked type-only), resolved to the module it names.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def modules(src: Path = SRC) -> dict[str, tuple[Path, bool]]:
    """Every module of the package: dotted name -> (file, is a package's __init__)."""
    found = {}
    for path in (src / "fathom").rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return found


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def absolute(node: ast.ImportFrom, package: str) -> str:
    """The module a `from … import` names, relative imports resolved against `package`."""
    if not node.level:
        return node.module or ""
    up = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(up + ([node.module] if node.module else []))


def imports(mods: dict[str, tuple[Path, bool]]) -> list[tuple[str, str, int, bool]]:
    """(importer, imported module, line, type-only) for every import of a fathom module."""
    edges = []

    def resolve(name: str) -> str:
        while name not in mods:
            name = name.rsplit(".", 1)[0]
        return name

    for name, (path, is_pkg) in mods.items():
        package = name if is_pkg else name.rsplit(".", 1)[0]

        def walk(node: ast.AST, type_only: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and _type_checking(child):
                    for sub in child.body:
                        visit(sub, True)
                    for sub in child.orelse:
                        visit(sub, type_only)
                else:
                    visit(child, type_only)

        def visit(node: ast.AST, type_only: bool) -> None:
            targets = []
            if isinstance(node, ast.Import):
                targets = [resolve(a.name) for a in node.names if a.name.split(".")[0] == "fathom"]
            elif isinstance(node, ast.ImportFrom):
                base = absolute(node, package)
                if base.split(".")[0] == "fathom":
                    targets = [resolve(f"{base}.{a.name}") for a in node.names]
            edges.extend((name, t, node.lineno, type_only) for t in dict.fromkeys(targets) if t != name)
            walk(node, type_only)

        walk(ast.parse(path.read_text(encoding="utf-8"), str(path)), False)
    return edges
