"""Symbols from the tree-sitter parse: one small fixture per language (tests/fixtures/symbols)
and the definitions, calls and imports it holds, written out by hand; Python against its own
`ast`; and the symbol table following a store's rows (a changed file parsed again, a gone one
forgotten, an unchanged index not read twice).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fathom.index.chunk import Chunk
from fathom.index.chunkers.languages import detect_language
from fathom.index.chunking import chunk_file
from fathom.index.store.values import ManifestEntry
from fathom.index.symbols.extract import LANGUAGES, extract
from fathom.index.symbols.table import SymbolTable
from tests.index.symbol_fixtures import EXPECTED, FIXTURES


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_language_fixture_gives_its_definitions_calls_and_imports(name: str):
    path = FIXTURES / name
    language, _ = detect_language(name)
    assert language in LANGUAGES
    found = extract(path.read_text(), language)
    definitions, uses = EXPECTED[name]
    assert [(d.qualname, d.kind, d.start_line, d.end_line) for d in found.definitions] == definitions
    assert [(o.name, o.use, o.line, o.enclosing) for o in found.occurrences if o.use != "mention"] == uses
    # A definition's own name is not a use of it; every signature is its head, on one line.
    lines = path.read_text().split("\n")
    for d in found.definitions:
        assert (d.name, d.start_line) not in {
            (o.name, o.line) for o in found.occurrences if o.column == lines[o.line - 1].find(d.name)
        }
        assert d.signature and "\n" not in d.signature and d.name.lower() in d.signature.lower()


def test_every_new_language_has_a_fixture():
    languages = {detect_language(name)[0] for name in EXPECTED}
    assert languages == {"csharp", "ruby", "php", "kotlin", "swift", "scala", "lua", "shell"}
    assert {p.name for p in FIXTURES.iterdir()} == set(EXPECTED)


PYTHON = """\
import os
from pathlib import Path as P


def top(a, b=os.sep):
    def inner():
        return top(1)
    return inner()


class Host(Base):
    @property
    def size(self) -> int:
        return self.grow(P("x"))

    async def grow(self, path):
        class Local:
            pass
        return await path.read()
"""


def test_python_definitions_match_its_own_ast():
    found = extract(PYTHON, "python")
    walked = []

    def visit(node: ast.AST, scope: str | None, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{scope}.{child.name}" if scope else child.name
                kind = "class" if isinstance(child, ast.ClassDef) else "method" if in_class else "function"
                walked.append((name, kind, child.lineno, child.end_lineno))
                visit(child, name, isinstance(child, ast.ClassDef))
            else:
                visit(child, scope, in_class)

    visit(ast.parse(PYTHON), None, False)
    assert [(d.qualname, d.kind, d.start_line, d.end_line) for d in found.definitions] == walked
    assert [d.signature for d in found.definitions if d.name in ("size", "grow")] == [
        "def size(self) -> int",
        "async def grow(self, path)",
    ]
    uses = {(o.name, o.line): (o.use, o.enclosing) for o in found.occurrences}
    assert uses[("top", 7)] == ("call", "top.inner")  # a recursive call, from the nested def
    assert uses[("grow", 14)] == ("call", "Host.size")  # `self.grow(…)` calls grow, not self
    assert uses[("self", 14)] == ("mention", "Host.size")
    assert uses[("property", 12)] == ("mention", "Host")  # a decorator sits outside its def
    assert uses[("Path", 2)] == ("import", None) and uses[("P", 14)] == ("call", "Host.size")
    assert ("top", 5) not in uses and ("Host", 11) not in uses  # definition sites


def test_a_language_without_symbols_gives_none():
    assert "yaml" not in LANGUAGES and "markdown" not in LANGUAGES
    empty = extract("key: value\n", "yaml")
    assert empty.definitions == [] and empty.occurrences == []


class RowStore:
    """A store's two read paths the table uses (manifest and chunks), over real chunks of the
    chunker; counts the chunk reads."""

    def __init__(self, files: dict[str, str]):
        self.files = dict(files)
        self.reads = 0

    def _rows(self) -> list[Chunk]:
        return [c for path, text in self.files.items() for c in chunk_file(path, text) if c.table == "code"]

    def manifest(self, project: str, table: str) -> list[ManifestEntry]:
        return [ManifestEntry(c.chunk_id, c.content_hash, c.path) for c in self._rows()]

    def chunks(self, project: str, table: str, *, chunk_ids=()) -> list[Chunk]:
        self.reads += 1
        wanted = set(chunk_ids)
        return [c for c in self._rows() if c.chunk_id in wanted]


def test_the_table_follows_the_store_file_by_file(tmp_path: Path):
    store = RowStore(
        {
            "a.py": "def one():\n    return two()\n",
            "b.py": "def two():\n    return 2\n",
            "c.py": "def four():\n    pass\n",
            "README.md": "# Hi\n",
        }
    )
    table = SymbolTable(tmp_path / "symbols.sqlite")
    first = table.refresh(store, "p")
    assert (first.parsed, first.forgotten, first.unchanged) == (3, 0, False)
    assert [(r.path, r.qualname) for r in table.definitions(["p"], "two")[0]] == [("b.py", "two")]
    refs, cut = table.references(["p"], "two")
    assert [(r.path, r.line, r.use, r.enclosing, r.text) for r in refs] == [
        ("a.py", 2, "call", "one", "return two()")
    ] and not cut

    reads = store.reads
    assert table.refresh(store, "p").unchanged and store.reads == reads  # nothing re-read

    store.files["b.py"] = "\n\ndef two():\n    return 2\n\n\nclass Three:\n    pass\n"
    del store.files["a.py"]
    again = table.refresh(store, "p")
    assert (again.parsed, again.forgotten) == (1, 1)  # only the changed file parsed again
    assert [r.path for r in table.definitions(["p"], "four")[0]] == ["c.py"]
    assert [(r.qualname, r.start_line) for r in table.outline("p", "b.py")] == [("two", 3), ("Three", 7)]
    assert table.references(["p"], "two")[0] == [] and table.outline("p", "a.py") == []
    assert table.definitions(["other"], "two") == ([], False)  # another project's query sees none
    assert (tmp_path / "symbols.sqlite").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("language", "source", "calls"),
    [
        ("csharp", "class A { void F() { var x = new List<decimal>(); Make<int>(1); } }", ["List", "Make"]),
        ("java", "class A { void f() { var x = new ArrayList<String>(); g(); } }", ["ArrayList", "g"]),
        ("scala", "object A { def f = new Ledger(1) }", ["Ledger"]),
        ("rust", "fn f() { parse::<u8>(); v.push(1); }", ["parse", "push"]),
        ("typescript", "f<number>(1); new Map<string, number>(); a.b.c();", ["f", "Map", "c"]),
        ("go", "package p\nfunc f() { fmt.Println(1); g() }", ["Println", "g"]),
        ("c", "int f(void) { return g(h); }", ["g"]),
        ("cpp", "int f() { return ns::g(1) + obj.m(); }", ["g", "m"]),
        ("javascript", "new Queue(); this.drain(); x(y)(z);", ["Queue", "drain", "x"]),
    ],
)
def test_a_call_is_its_callees_last_name_with_or_without_type_arguments(language, source, calls):
    found = extract(source, language)
    assert [o.name for o in found.occurrences if o.use == "call"] == calls


def test_references_read_one_snapshot_while_a_refresh_forgets_a_file(tmp_path: Path, monkeypatch):
    """A refresh that forgets a file between the references query's statements changes
    nothing it answers: rows and the lines they are on come from one snapshot."""
    import sqlite3
    from contextlib import contextmanager

    store = RowStore({"a.py": "def one():\n    return two()\n", "b.py": "def three():\n    two()\n"})
    table = SymbolTable(tmp_path / "symbols.sqlite")
    table.refresh(store, "p")
    opened = table._connect
    seen: list[str] = []

    def trace(statement: str) -> None:
        # Once the references have been selected, another writer forgets a.py.
        if any("FROM refs" in s for s in seen) and not any(s == "forgot" for s in seen):
            seen.append("forgot")
            other = sqlite3.connect(tmp_path / "symbols.sqlite")
            with other:
                for name in ("files", "symbols", "refs"):
                    other.execute(f"DELETE FROM {name} WHERE path = 'a.py'")
            other.close()
        seen.append(statement)

    @contextmanager
    def traced():
        with opened() as conn:
            conn.set_trace_callback(trace)
            yield conn

    monkeypatch.setattr(table, "_connect", traced)
    refs, _ = table.references(["p"], "two")
    assert "forgot" in seen  # the other writer did land between the statements
    assert [(r.path, r.text) for r in refs] == [("a.py", "return two()"), ("b.py", "two()")]
    monkeypatch.undo()
    assert [r.path for r in table.references(["p"], "two")[0]] == ["b.py"]


def test_a_refresh_parses_outside_its_write_transaction(tmp_path: Path, monkeypatch):
    """While a refresh parses, another writer (another project's refresh) is never locked
    out: the write transaction only deletes and inserts, a batch of files at a time."""
    import sqlite3

    import fathom.index.symbols.table as table_module

    path = tmp_path / "symbols.sqlite"
    table = SymbolTable(path)
    parse = table_module.extract
    free: list[bool] = []

    def checked(text: str, language: str):
        other = sqlite3.connect(path, timeout=0)
        try:
            other.execute("BEGIN IMMEDIATE")  # fails at once if the write lock is held
            other.rollback()
            free.append(True)
        except sqlite3.OperationalError:
            free.append(False)
        finally:
            other.close()
        return parse(text, language)

    monkeypatch.setattr(table_module, "extract", checked)
    monkeypatch.setattr(table_module, "FILES_PER_WRITE", 2, raising=False)
    store = RowStore({f"m{i}.py": f"def f{i}():\n    return g()\n" for i in range(5)})
    table.refresh(store, "p")
    table.refresh(store, "p")  # unchanged: nothing parsed again
    assert free == [True] * 5
    assert len(table.references(["p"], "g")[0]) == 5
    assert [r.path for r in table.definitions(["p"], "f4")[0]] == ["m4.py"]
    del store.files["m0.py"]
    store.files["m1.py"] = "def h():\n    pass\n"
    again = table.refresh(store, "p")
    assert (again.parsed, again.forgotten) == (1, 1)
    assert len(table.references(["p"], "g")[0]) == 3


class FakeFathom:
    """What the symbol service reads of `Fathom`: its data dir, the caller's projects, a store."""

    def __init__(self, data_dir: Path, store: RowStore):
        from types import SimpleNamespace

        self.settings = SimpleNamespace(data_dir=data_dir)
        self.store = store

    def searchable(self, project, table):
        return ["p"], []


def test_a_damaged_symbol_table_is_a_typed_error_naming_the_fix(tmp_path: Path):
    from fathom.errors import StoreError
    from fathom.index.symbols.table import SymbolTableError
    from fathom.service import symbols

    fathom = FakeFathom(tmp_path, RowStore({"a.py": "def one():\n    return two()\n"}))
    assert [r.path for r in symbols.find_symbol(fathom, "one").rows] == ["a.py"]
    (tmp_path / "symbols.sqlite").write_bytes(b"not a database, garbage " * 400)
    for wal in ("symbols.sqlite-wal", "symbols.sqlite-shm"):
        (tmp_path / wal).unlink(missing_ok=True)
    for call in (
        lambda: symbols.find_symbol(fathom, "one"),
        lambda: symbols.find_references(fathom, "two"),
        lambda: symbols.outline(fathom, "a.py"),
    ):
        with pytest.raises(SymbolTableError) as caught:
            call()
        assert isinstance(caught.value, StoreError) and not caught.value.busy
        assert "remove that file (symbols.sqlite in the data dir" in str(caught.value)
        assert "rebuilds it from the index" in str(caught.value)
    # The fix the message names works: removed, the table is made again from the index.
    (tmp_path / "symbols.sqlite").unlink()
    assert [r.path for r in symbols.find_references(fathom, "two").rows] == ["a.py"]


def test_definitions_stop_at_a_bound_and_say_so(tmp_path: Path, monkeypatch):
    """A name defined everywhere (`__init__` across a monorepo) returns the first
    `MAX_DEFINITIONS` and `truncated`; a qualified name is matched before the bound."""
    import fathom.index.symbols.table as table_module
    from fathom.service import symbols

    monkeypatch.setattr(table_module, "MAX_DEFINITIONS", 2, raising=False)
    source = "".join(f"class C{i}:\n    def __init__(self):\n        pass\n" for i in range(4))
    fathom = FakeFathom(tmp_path, RowStore({"a.py": source}))
    found = symbols.find_symbol(fathom, "__init__")
    assert [r.qualname for r in found.rows] == ["C0.__init__", "C1.__init__"] and found.truncated
    last = symbols.find_symbol(fathom, "C3.__init__")
    assert [r.qualname for r in last.rows] == ["C3.__init__"] and not last.truncated
    exact = symbols.find_symbol(fathom, "C1")
    assert [r.qualname for r in exact.rows] == ["C1"] and not exact.truncated


def test_first_uses_at_once_build_one_table(tmp_path: Path, monkeypatch):
    import threading
    import time

    from fathom.service import symbols

    built: list[SymbolTable] = []

    class Slow(SymbolTable):
        def __init__(self, path: Path):
            time.sleep(0.05)  # widens the window two first uses would both build in
            super().__init__(path)
            built.append(self)

    monkeypatch.setattr(symbols, "SymbolTable", Slow)
    fathom = FakeFathom(tmp_path, RowStore({}))
    seen: list[SymbolTable] = []
    threads = [threading.Thread(target=lambda: seen.append(symbols.table_of(fathom))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 1 and all(t is built[0] for t in seen)
