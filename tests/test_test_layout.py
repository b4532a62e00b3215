"""The tests' own layout: no file under `tests/` imports from a test module.

A helper or fixture that two files share lives in a fixtures module of its folder
(`tests/<folder>/<something>_fixtures.py`) or in a plain helper module (`tests/source_tree.py`),
never in a `test_*.py` file: importing a test module as a library re-registers its fixtures in
the importer, ties unrelated tests to its edits, and hides where the shared helper lives. A
fixture itself is never imported by name: `tests/conftest.py` lists every fixtures module as a
plugin of the suite, and each fixture name is defined once across them.

Every `import` and `from … import` of every file under `tests/` is read with `ast` (module level
and inside functions alike), relative imports resolved; a module any part of whose dotted name
starts with `test_`, or a `test_*` name taken from a package (`from tests.server import
test_mcp`), is refused, naming the file, the line and the module.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _is_test(name: str) -> bool:
    return any(part.startswith("test_") for part in name.split("."))


def imports_of_test_modules(root: Path = TESTS) -> list[str]:
    """'file:line imports module' for every import of a test module by a file under `root`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        package = ".".join(rel.parent.parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            named: list[str] = []
            if isinstance(node, ast.Import):
                named = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                up = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                base = ".".join([*up, *([node.module] if node.module else [])])
                named = [base] if _is_test(base) else [f"{base}.{a.name}" for a in node.names]
            found += [f"{rel}:{node.lineno} imports {m}" for m in named if _is_test(m)]
    return found


def test_no_file_under_tests_imports_from_a_test_module():
    assert imports_of_test_modules() == []


def test_the_check_sees_every_form_of_import_of_a_test_module(tmp_path: Path):
    root = tmp_path / "tests"
    (root / "server").mkdir(parents=True)
    (root / "server" / "test_a.py").write_text(
        "from tests.server.test_b import helper\n"
        "import tests.index.test_c\n"
        "from tests.server import test_d\n"
        "from .test_e import fixture\n"
        "def f():\n"
        "    from tests.test_layers import imports\n"
    )
    (root / "server" / "b_fixtures.py").write_text(
        "from tests.server.mcp_fixtures import mcp\nfrom tests.server import admin_fixtures\nimport pytest\n"
    )
    assert imports_of_test_modules(root) == [
        "tests/server/test_a.py:1 imports tests.server.test_b",
        "tests/server/test_a.py:2 imports tests.index.test_c",
        "tests/server/test_a.py:3 imports tests.server.test_d",
        "tests/server/test_a.py:4 imports tests.server.test_e",
        "tests/server/test_a.py:6 imports tests.test_layers",
    ]


def fixtures_by_module(root: Path = TESTS) -> dict[str, set[str]]:
    """Each module under `root` that is not a test module nor a conftest, with the names of the
    pytest fixtures it defines at module level (those that define any)."""
    found: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        if path.name.startswith("test_") or path.name == "conftest.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        names = {
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and any("fixture" in ast.unparse(d) for d in node.decorator_list)
        }
        if names:
            found[".".join(path.relative_to(root.parent).with_suffix("").parts)] = names
    return found


def fixtures_imported_by_name(root: Path = TESTS) -> list[str]:
    """'file:line imports fixture' for every import of a fixture from a fixtures module: a test
    names a fixture as a parameter, and `tests/conftest.py` provides it."""
    fixtures = fixtures_by_module(root)
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module in fixtures:
                taken = [a.name for a in node.names if a.name in fixtures[node.module]]
                found += [f"{rel}:{node.lineno} imports {node.module}.{name}" for name in taken]
    return found


def test_every_fixtures_module_is_provided_by_the_root_conftest_and_none_is_imported_by_name():
    from tests import conftest

    fixtures = fixtures_by_module()
    assert sorted(conftest.pytest_plugins) == sorted(fixtures)
    assert fixtures_imported_by_name() == []
    # one definition of each name across them: the suite sees one fixture of that name
    names = [name for defined in fixtures.values() for name in defined]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_the_fixture_check_sees_an_import_by_name(tmp_path: Path):
    root = tmp_path / "tests"
    (root / "index").mkdir(parents=True)
    (root / "index" / "shop_fixtures.py").write_text(
        "import pytest\n\n@pytest.fixture\ndef shop():\n    return 1\n\ndef helper():\n    return 2\n"
    )
    (root / "index" / "test_a.py").write_text("from tests.index.shop_fixtures import helper, shop\n")
    assert fixtures_by_module(root) == {"tests.index.shop_fixtures": {"shop"}}
    assert fixtures_imported_by_name(root) == [
        "tests/index/test_a.py:1 imports tests.index.shop_fixtures.shop"
    ]
