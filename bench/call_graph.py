"""The call graph against an independent walk: precision and recall of Fathom's resolved call
edges on httpx and rich (their installed source, indexed), against Python's own `ast`.

    .venv/bin/python bench/call_graph.py [--project httpx|rich ...]

Each package is copied, indexed through the service (a hash encoder stands in for the model:
calls never read a vector) and every `resolved` edge (caller definition -> callee definition,
from `fathom.index.symbols.calls.edges`) is compared with the edges this script's own walk of
the same files resolves (with, for each package, each query's latency at the service over the
fresh table: `--runs 0` skips them): `self.m()`/`cls.m()` to the method of the enclosing class or its
bases, a bare `f()` to a function in scope (nested, the module's, or imported from a module of
the package, following re-exports), `mod.f()` through an imported module, `Class.m()` through
a class. Printed per package: edges each side, precision (Fathom's resolved edges the walk
also finds) and recall (the walk's edges Fathom resolves), and a sample of each difference.
The targets are precision >= 0.9 and recall >= 0.8 (docs/calls.md).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import importlib
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common  # noqa: F401 - puts src/ on the path, sets the offline flags
from _common import percentile
from symbols import HashEncoder

from fathom.config import Settings
from fathom.index.symbols import calls
from fathom.service import Fathom, symbols
from fathom.service import calls as service

Edge = tuple[str, str, str, str]  # caller path, caller qualname, callee path, callee qualname


class Module:
    def __init__(self, path: str, tree: ast.Module):
        self.path, self.tree = path, tree
        self.top: dict[str, str] = {}  # name -> qualname of a top-level def or class
        self.classes: dict[str, ast.ClassDef] = {}  # qualname -> class
        self.imports: dict[str, tuple[str | None, str | None]] = {}  # local -> (module path, name)


def module_path(files: dict[str, Module], here: str, level: int, name: str | None) -> str | None:
    """The file a (relative) module name names in the package, or None."""
    parts = here.split("/")[:-1]
    if level:
        parts = parts[: len(parts) - (level - 1)] if level > 1 else parts
    elif name:
        parts = []
        name = ".".join(name.split(".")[1:])  # the package's own name is its root
    for part in (name or "").split("."):
        if part:
            parts.append(part)
    base = "/".join(parts)
    for candidate in (f"{base}.py", f"{base}/__init__.py" if base else "__init__.py"):
        if candidate in files:
            return candidate
    return None


def read(root: Path, package: str) -> dict[str, Module]:
    files = {
        str(p.relative_to(root)): Module(str(p.relative_to(root)), ast.parse(p.read_text()))
        for p in sorted(root.rglob("*.py"))
    }
    for mod in files.values():
        for node in mod.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                mod.top[node.name] = node.name
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.ImportFrom):
                if not node.level and not (node.module or "").startswith(package):
                    continue
                source = module_path(files, mod.path, node.level, node.module)
                for alias in node.names:
                    sub = module_path(
                        files,
                        mod.path,
                        node.level,
                        f"{node.module or ''}.{alias.name}".strip(".")
                        if not node.level
                        else f"{node.module}.{alias.name}"
                        if node.module
                        else alias.name,
                    )
                    mod.imports[alias.asname or alias.name] = (sub, None) if sub else (source, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == package and alias.asname:
                        mod.imports[alias.asname] = (module_path(files, mod.path, 0, alias.name), None)
    return files


def target(
    files: dict[str, Module], path: str | None, name: str | None, hops: int = 0
) -> tuple[str, str] | None:
    """(path, qualname) of `name` defined at the top of `path`, following re-exports."""
    if path is None or name is None or hops > 4:
        return None
    mod = files[path]
    if name in mod.top:
        return path, mod.top[name]
    if name in mod.imports:
        source, original = mod.imports[name]
        return target(files, source, original, hops + 1)
    return None


def class_of(files: dict[str, Module], path: str, name: str) -> tuple[str, ast.ClassDef] | None:
    found = target(files, path, name)
    if found is None:
        return None
    for node in files[found[0]].tree.body:
        if isinstance(node, ast.ClassDef) and node.name == found[1]:
            return found[0], node
    return None


def method(
    files: dict[str, Module], path: str, cls: ast.ClassDef, name: str, depth: int = 0
) -> tuple[str, str] | None:
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return path, f"{cls.name}.{name}"
    if depth > 6:
        return None
    for base in cls.bases:
        if isinstance(base, ast.Name) and (found := class_of(files, path, base.id)):
            hit = method(files, found[0], found[1], name, depth + 1)
            if hit:
                return hit
    return None


def walk_edges(files: dict[str, Module]) -> set[Edge]:
    out: set[Edge] = set()
    for mod in files.values():

        def visit(
            node: ast.AST,
            scope: str | None,
            cls: ast.ClassDef | None,
            local: dict[str, str],
            mod: Module = mod,
        ) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    q = f"{scope}.{child.name}" if scope else child.name
                    calls_in(child, q, None, {}, mod)  # its body's own statements
                    visit(child, q, child if scope is None or cls is None else None, {})
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    q = f"{scope}.{child.name}" if scope else child.name
                    nested = {
                        n.name: f"{q}.{n.name}"
                        for n in ast.walk(child)
                        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n is not child
                    }
                    seen = {**local, **nested}  # its own nested functions, and its host's
                    calls_in(child, q, cls if scope and cls and scope == cls.name else None, seen, mod)
                    visit(child, q, None, seen)
                else:
                    visit(child, scope, cls, local)

        def calls_in(
            fn: ast.AST, q: str, cls: ast.ClassDef | None, nested: dict[str, str], mod: Module
        ) -> None:
            stack = list(ast.iter_child_nodes(fn))
            while stack:
                node = stack.pop()
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    continue  # its own definition's calls
                stack.extend(ast.iter_child_nodes(node))
                if not isinstance(node, ast.Call):
                    continue
                func, hit = node.func, None
                if isinstance(func, ast.Name):
                    hit = (
                        (mod.path, nested[func.id]) if func.id in nested else target(files, mod.path, func.id)
                    )
                elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                    owner = func.value.id
                    if owner in ("self", "cls") and cls is not None:
                        hit = method(files, mod.path, cls, func.attr)
                    elif owner in mod.imports and mod.imports[owner][1] is None:
                        hit = target(files, mod.imports[owner][0], func.attr)
                    elif found := class_of(files, mod.path, owner):
                        hit = method(files, found[0], found[1], func.attr)
                if hit:
                    out.add((mod.path, q, *hit))

        visit(mod.tree, None, None, {})
    return out


# What each package's latency rows ask: (name, direction) at the service.
QUERIES = {
    "httpx": ["Client.send", "BaseClient._merge_cookies", "URL"],
    "rich": ["Console.print", "Segment", "Text.append"],
}


def fathom_edges(fathom: Fathom, name: str) -> set[Edge]:
    symbols.fresh_projects(fathom, name)
    with symbols.table_of(fathom).snapshot() as conn:
        return {
            (c.path, c.qualname, t.path, t.qualname)
            for c, t, how in calls.edges(conn, name)
            if how == "resolved"
        }


def latency(fathom: Fathom, package: str, runs: int) -> None:
    """Median and p95 ms of each query at the service (symbol table already fresh)."""
    for name in QUERIES[package]:
        cases: list[tuple[str, Callable[[], Any]]] = [
            ("find_references", lambda n=name: symbols.find_references(fathom, n))
        ]
        cases += [
            (f"find_calls {d}", lambda n=name, d=d: service.find_calls(fathom, n, direction=d, depth=3))
            for d in service.DIRECTIONS
        ]
        for what, fn in cases:
            ms, size = [], 0
            for _ in range(runs):
                start = time.perf_counter()
                answer = fn()
                ms.append((time.perf_counter() - start) * 1000)
            size = len(
                getattr(answer, "rows", None)
                or getattr(answer, "calls", None)
                or getattr(answer, "impacted", None)
                or []
            )
            print(
                f"  {what}({name!r}): {size} item(s), p50 {statistics.median(ms):.1f} ms, "
                f"p95 {percentile(ms, 95):.1f} ms"
            )


def measure(package: str, runs: int) -> None:
    source = Path(importlib.import_module(package).__file__ or "").parent
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / package
        shutil.copytree(source, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        walked = walk_edges(read(root, package))
        fathom = Fathom(Settings(data_dir=Path(tmp) / "data"), encoder=HashEncoder())
        asyncio.run(fathom.index(root, package))
        found = fathom_edges(fathom, package)
        if runs:
            latency(fathom, package, runs)
    both = walked & found
    precision = len(both) / len(found) if found else 0.0
    recall = len(both) / len(walked) if walked else 0.0
    print(
        f"{package}: fathom resolved {len(found)} edges, ast walk {len(walked)}, both "
        f"{len(both)}: precision {precision:.3f}, recall {recall:.3f}"
    )
    for label, edges in (("fathom only", found - walked), ("walk only", walked - found)):
        for edge in sorted(edges)[:5]:
            print(f"  {label}: {edge[0]}:{edge[1]} -> {edge[2]}:{edge[3]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--project", action="append", choices=["httpx", "rich"])
    parser.add_argument("--runs", type=int, default=20, help="timed runs per query (0: none)")
    args = parser.parse_args()
    for package in args.project or ["httpx", "rich"]:
        measure(package, args.runs)


if __name__ == "__main__":
    main()
