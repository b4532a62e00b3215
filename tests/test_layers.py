"""The architecture in the imports: layers that only look down, and no import cycle.

Every `import` and `from … import` of `src/fathom` is read with `ast` (module level and inside
functions alike: a function-level import is still a dependency, only a later one), resolved to
the module it names, and checked against the layers `docs/architecture.md` draws:

    vocabulary < inference < retrieval < fleet < service < agents < server < cli

`devtools` (the OpenRouter emulator, the scripted local LLM server) stands aside: it may use the
product, and the product never imports it.

Imports under `if TYPE_CHECKING:` never run, but they are dependencies all the same (a reader
must know the other module to read this one): they are checked for direction and count as edges
of the cycle check, with no exception.

A leading underscore means "this module's own": no module imports a `_name` from another
(`from fathom.x import _helper`), nor reaches one through a module it imported
(`store._in_list`). That holds between the modules of one package too, and for a package's
`__init__`: a helper two modules share is public in the module that owns it. A private
*module* (`fathom.pkg._impl`) may be imported by its own package only. Dunders are not private.

The stores' own attributes (`LanceStore._table`, `PostgresStore._tables`…) are the store
package's: no other module, test or benchmark reaches them, as an attribute or by name; they use
the parts and readings a store makes public (`slot_table`, `matrix_cache`, `ann`,
`project_dir`). The crash harness alone names the storage steps it wraps (`HARNESS`).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.source_tree import SRC, absolute, imports, modules

STORES = {"Store": "contract.py", "LanceStore": "lance.py", "PostgresStore": "postgres.py"}
# Files that may name a store's own steps, each with its reason.
HARNESS = {
    "tests/cli/cli_child.py": "the crash harness kills a real index run at each storage step "
    "(a table made, rows merged, the pointer written…), so it wraps those steps by name",
}

# Lowest first. A module belongs to the first layer one of whose prefixes it starts with.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "vocabulary",
        (
            "fathom",
            "fathom.errors",
            "fathom.roles",
            "fathom.policy",
            "fathom.space",
            "fathom.clock",
            "fathom.logsafe",
            "fathom.config",
            # the long-running commands' shared log set-up (server and sidecar use it)
            "fathom.commandline",
        ),
    ),
    ("inference", ("fathom.inference",)),
    ("retrieval", ("fathom.index", "fathom.scope")),
    ("fleet", ("fathom.fleet",)),
    ("service", ("fathom.service",)),
    ("agents", ("fathom.agents",)),
    ("server", ("fathom.server",)),
    (
        "cli",
        (
            "fathom.cli",  # the package: one module per command group
            "fathom.hosts",
            "fathom.demo",
            "fathom.__main__",
        ),
    ),
]
ASIDE = "devtools"
ASIDE_PREFIX = "fathom.devtools"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_uses(mods: dict[str, tuple[Path, bool]]) -> list[str]:
    """Every place a module takes another module's `_name`: imported by name, reached as an
    attribute of an imported module, or a private module imported from outside its package."""
    bad = []

    def owner_of(name: str) -> str:
        while name not in mods:
            name = name.rsplit(".", 1)[0]
        return name

    def private_module_outside(importer: str, module: str) -> bool:
        parts = module.split(".")
        for i, part in enumerate(parts):
            if _private(part):
                home = ".".join(parts[:i])
                return not (importer == home or importer.startswith(home + "."))
        return False

    for name, (path, is_pkg) in mods.items():
        package = name if is_pkg else name.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        bound: dict[str, str] = {}  # local name -> the fathom module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] != "fathom":
                        continue
                    if private_module_outside(name, a.name):
                        bad.append(f"{name}:{node.lineno} imports the private module {a.name}")
                    if a.asname and a.name in mods:
                        bound[a.asname] = a.name
            elif isinstance(node, ast.ImportFrom):
                base = absolute(node, package)
                if base.split(".")[0] != "fathom":
                    continue
                for a in node.names:
                    full = f"{base}.{a.name}"
                    if full in mods:  # a module imported from its package
                        if private_module_outside(name, full):
                            bad.append(f"{name}:{node.lineno} imports the private module {full}")
                        bound[a.asname or a.name] = full
                    elif _private(a.name) and owner_of(base) != name:
                        bad.append(f"{name}:{node.lineno} imports {a.name} from {owner_of(base)}")
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and _private(node.attr)
                and bound[node.value.id] != name
            ):
                bad.append(f"{name}:{node.lineno} uses {node.attr} of {bound[node.value.id]}")
    return sorted(set(bad))


def layer_of(module: str) -> str:
    if module == ASIDE_PREFIX or module.startswith(ASIDE_PREFIX + "."):
        return ASIDE
    best = None
    for layer, prefixes in LAYERS:
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > best[1]):
                best = (layer, len(p))
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[0]


RANK = {layer: i for i, (layer, _) in enumerate(LAYERS)}


def upward(edges: list[tuple[str, str, int, bool]]) -> list[str]:
    """Every import that names a higher layer (or devtools, from the product)."""
    bad = []
    for src, dst, line, type_only in edges:
        ls, ld = layer_of(src), layer_of(dst)
        if ls == ASIDE:
            continue
        if ld == ASIDE or RANK[ld] > RANK[ls]:
            bad.append(
                f"{src}:{line} ({ls}) imports {dst} ({ld})" + (" under TYPE_CHECKING" if type_only else "")
            )
    return bad


def cycles(edges: list[tuple[str, str, int, bool]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for src, dst, _, _type_only in edges:
        graph.setdefault(src, set()).add(dst)
        graph.setdefault(dst, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def test_every_module_has_a_layer():
    assert {layer_of(m) for m in modules()} == {*RANK, ASIDE}


def test_no_import_climbs_a_layer():
    assert upward([e for e in imports(modules()) if not e[3]]) == []


def test_no_type_only_import_climbs_a_layer():
    assert upward(imports(modules())) == []


def test_no_import_cycle():
    assert cycles([e for e in imports(modules()) if not e[3]]) == []


def test_no_import_cycle_counting_type_only_imports():
    assert cycles(imports(modules())) == []


def test_the_checks_see_function_level_and_type_only_imports():
    """The reader is not blind to the imports the layering most often hides behind."""
    edges = imports(modules())
    assert ("fathom.service", "fathom.index.watch") in {(s, d) for s, d, _, t in edges if not t}
    assert ("fathom.index.watch", "fathom.index.job") in {(s, d) for s, d, _, t in edges if t}
    climb = [("fathom.index.rerank", "fathom.agents.routes", 1, False)]
    assert upward(climb) == ["fathom.index.rerank:1 (retrieval) imports fathom.agents.routes (agents)"]
    loop = [
        ("fathom.index.store", "fathom.index.pgstore", 1, False),
        ("fathom.index.pgstore", "fathom.index.store", 2, True),
    ]
    assert cycles(loop) == [["fathom.index.pgstore", "fathom.index.store"]]


def test_no_module_takes_another_modules_private_names():
    assert private_uses(modules()) == []


def test_the_private_check_sees_names_attributes_and_private_modules(tmp_path):
    pkg = tmp_path / "fathom" / "index"
    (pkg / "_impl").mkdir(parents=True)
    for f in ("fathom/__init__.py", "fathom/index/__init__.py", "fathom/index/_impl/__init__.py"):
        (tmp_path / f).write_text("", encoding="utf-8")
    (pkg / "store.py").write_text("def _in_list(): ...\ndef own(): return _in_list()\n", encoding="utf-8")
    (pkg / "verify.py").write_text(
        "from fathom.index.store import _in_list, own\n"
        "from fathom.index import store as s\n"
        "from fathom.index import _impl\n"
        "s._in_list(); s.own(); s.__name__\n",
        encoding="utf-8",
    )
    (tmp_path / "fathom" / "service.py").write_text(
        "import fathom.index._impl\nfrom .index.store import _in_list\n", encoding="utf-8"
    )
    assert private_uses(modules(tmp_path)) == [
        "fathom.index.verify:1 imports _in_list from fathom.index.store",
        "fathom.index.verify:4 uses _in_list of fathom.index.store",
        "fathom.service:1 imports the private module fathom.index._impl",
        "fathom.service:2 imports _in_list from fathom.index.store",
    ]


def _own_attributes(tree: ast.AST, classes: set[str] | None = None) -> set[str]:
    """The private methods and `self._x` attributes the classes of `tree` define (`classes`:
    only those)."""
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef) or (classes is not None and node.name not in classes):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef) and _private(sub.name):
                found.add(sub.name)
            elif (
                isinstance(sub, ast.Attribute)
                and isinstance(sub.value, ast.Name)
                and sub.value.id == "self"
                and isinstance(sub.ctx, ast.Store)
                and _private(sub.attr)
            ):
                found.add(sub.attr)
    return found


def store_reach_ins(root: Path) -> list[str]:
    """Each place outside `fathom/index/store` (under `root`: src, tests, bench) that uses a
    private attribute of a store class. A name some other class defines as well (a test's own
    `Store` subclass implementing `_upsert`, the symbol table's `_tables`) is not told apart."""
    package = root / "src" / "fathom" / "index" / "store"
    stores: set[str] = set()
    for name, file in STORES.items():
        stores |= _own_attributes(ast.parse((package / file).read_text(encoding="utf-8")), {name})
    texts = {
        path: path.read_text(encoding="utf-8")
        for folder in ("src", "tests", "bench")
        for path in sorted((root / folder).rglob("*.py"))
        if package not in path.parents
    }
    outside = {  # a file naming none of them neither uses nor defines one: not parsed
        path.relative_to(root): ast.parse(text, str(path))
        for path, text in texts.items()
        if any(name in text for name in stores)
    }
    theirs = stores - {name for tree in outside.values() for name in _own_attributes(tree)}
    bad = []
    for path, tree in outside.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in theirs:
                bad.append(f"{path}:{node.lineno} uses the store's {node.attr}")
            elif isinstance(node, ast.Constant) and node.value in theirs and str(path) not in HARNESS:
                bad.append(f"{path}:{node.lineno} names the store's {node.value}")  # getattr(store, "_x")
    return bad


def test_nothing_outside_the_store_package_reaches_into_a_store():
    assert store_reach_ins(SRC.parent) == []


def test_the_store_check_sees_a_reach_in_and_lets_a_shared_name_be(tmp_path):
    store = tmp_path / "src" / "fathom" / "index" / "store"
    store.mkdir(parents=True)
    for name, file in STORES.items():
        (store / file).write_text(
            f"class {name}:\n    def _table(self): ...\n    def _upsert(self): self._tables = {{}}\n",
            encoding="utf-8",
        )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "class Fake:\n    def _upsert(self): ...\n\ndef test(store):\n    store._upsert(); store._table()\n",
        encoding="utf-8",
    )
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "b.py").write_text("store._tables.clear()\n", encoding="utf-8")
    (tmp_path / "bench" / "c.py").write_text("getattr(store, '_table')\n", encoding="utf-8")
    assert store_reach_ins(tmp_path) == [
        "tests/test_x.py:5 uses the store's _table",
        "bench/b.py:1 uses the store's _tables",
        "bench/c.py:1 names the store's _table",
    ]
