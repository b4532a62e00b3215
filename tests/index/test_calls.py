"""Navigation by calls through the assembled product: a project indexed by the real service,
then asked over a real MCP session (`find_references` graded, `find_calls` callers, callees
and impact) and through the `fathom calls` command; the tool listed only once some project's
symbols exist; the live sync keeping the call graph true to an edited file.

The sample is small and hand-checked, in three languages: Python (a `Console.print` method
beside builtin `print()` calls, imports, `self.`, a base class), Go (a package across two
files, a method's own receiver, an imported package) and TypeScript (an imported function,
`this.`, a namespace import). The measurement on httpx and rich against an `ast` walk is
bench/call_graph.py's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client
from typer.testing import CliRunner

from fathom.cli import app
from fathom.config import Settings
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom
from tests.index.retrieval_fixtures import write_project
from tests.index.watch_fixtures import hash_encoder, wait_for, watched

FILES = {
    "app/console.py": (
        "class Base:\n"
        "    def flush(self):\n"
        "        return None\n"
        "\n"
        "\n"
        "class Console(Base):\n"
        "    def print(self, text):\n"
        "        self.flush()\n"
        "        return render(text)\n"
        "\n"
        "    def log(self, text):\n"
        "        self.print(text)\n"
        "\n"
        "\n"
        "def render(text):\n"
        "    return text.upper()\n"
        "\n"
        "\n"
        "def escape(text):\n"
        "    return text\n"
    ),
    "app/report.py": (
        "from app.console import Console\n"
        "from app import console as con\n"
        "\n"
        "\n"
        "def total(rows):\n"
        "    print(len(rows))\n"
        "    return sum(rows)\n"
        "\n"
        "\n"
        "def report(rows, out):\n"
        "    out.print(total(rows))\n"
        "    con.render('done')\n"
        "    print('builtin')\n"
        "    return Console()\n"
        "\n"
        "\n"
        "def main():\n"
        "    report([1], Console())\n"
        "\n"
        "\n"
        "def quoted(text):\n"
        "    from html import escape\n"
        "    return escape(text)\n"
    ),
    "svc/store.go": (
        "package svc\n"
        "\n"
        'import "strings"\n'
        "\n"
        "type Store struct{}\n"
        "\n"
        "func (s *Store) Put(key string) string {\n"
        "\treturn s.norm(strings.TrimSpace(key))\n"
        "}\n"
        "\n"
        "func (s *Store) norm(key string) string {\n"
        "\treturn Clean(key)\n"
        "}\n"
    ),
    "svc/clean.go": ("package svc\n\nfunc Clean(key string) string {\n\treturn key\n}\n"),
    "web/format.ts": ("export function pad(s: string): string {\n  return s + ' ';\n}\n"),
    "web/other.ts": ("export function pad(s: string): string {\n  return s;\n}\n"),
    "web/view.ts": (
        "import { pad } from './format';\n"
        "import * as fmt from './format';\n"
        "\n"
        "export class View {\n"
        "  show(s: string): string {\n"
        "    return this.frame(pad(s));\n"
        "  }\n"
        "  frame(s: string): string {\n"
        "    return fmt.pad(s);\n"
        "  }\n"
        "}\n"
    ),
}


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[Path, Path]:
    """(data dir, project root) of the sample, indexed once as `calls`."""
    import asyncio

    base = tmp_path_factory.mktemp("calls")
    root = write_project(base / "calls", FILES)
    fathom = Fathom(Settings(data_dir=base / "data"), encoder=hash_encoder())
    asyncio.run(fathom.index(root, "calls"))
    return base / "data", root


async def call(client: Client, tool: str, **arguments) -> dict:
    found = await client.call_tool(tool, arguments)
    assert not found.is_error, found.content[0].text
    return found.structured_content


def sites(answer: dict) -> list[tuple[str, int, str | None, str]]:
    return [(r["path"], r["line"], r["caller"], r["resolution"]) for r in answer["results"]]


async def test_references_to_a_method_are_graded_and_builtins_stay_out(sample):
    data, _ = sample
    async with Client(build_mcp_server(Fathom(Settings(data_dir=data)))) as client:
        refs = await call(client, "find_references", name="Console.print")
        escapes = await call(client, "find_references", name="escape")
    graded = [(r["path"], r["line"], r["resolution"]) for r in refs["results"]]
    assert ("app/console.py", 12, "resolved") in graded  # self.print in Console.log
    assert ("app/report.py", 11, "likely") in graded  # out.print: a receiver of no known type
    builtins = [g for g in graded if g[0] == "app/report.py" and g[1] in (6, 13)]
    assert builtins == [("app/report.py", 6, "name-only"), ("app/report.py", 13, "name-only")]
    # `escape` imported from a module outside the project is not the project's `escape`.
    assert [
        (r["line"], r["use"], r["resolution"]) for r in escapes["results"] if r["path"] == "app/report.py"
    ] == [(23, "call", "name-only"), (22, "import", "name-only")]
    order = ["resolved", "likely", "name-only"]
    assert [order.index(g[2]) for g in graded] == sorted(order.index(g[2]) for g in graded)


async def test_callers_callees_and_impact_in_three_languages(sample):
    data, _ = sample
    async with Client(build_mcp_server(Fathom(Settings(data_dir=data)))) as client:
        callers = await call(client, "find_calls", name="Console.print")
        callees = await call(client, "find_calls", name="Console.print", direction="callees")
        impact = await call(client, "find_calls", name="render", direction="impact", depth=3)
        go_callees = await call(client, "find_calls", name="Store.Put", direction="callees")
        go_callers = await call(client, "find_calls", name="Clean")
        ts_callers = await call(client, "find_calls", name="pad")
        refused = await client.call_tool("find_calls", {"name": "render", "direction": "up"})
    assert sites(callers) == [
        ("app/console.py", 12, "Console.log", "resolved"),
        ("app/report.py", 11, "report", "likely"),
    ]
    reached = {(r["callee"], r["resolution"], tuple(r["targets"])) for r in callees["results"]}
    assert reached == {
        ("flush", "resolved", ("app/console.py:2 Base.flush",)),
        ("render", "resolved", ("app/console.py:15 render",)),
    }
    # Impact: Console.print and report call render; Console.log calls Console.print (depth 2),
    # main calls report (depth 2); grouped by file.
    assert [(r["path"], r["caller"], r["depth"]) for r in impact["results"]] == [
        ("app/console.py", "Console.print", 1),
        ("app/console.py", "Console.log", 2),
        ("app/report.py", "report", 1),
        ("app/report.py", "main", 2),
    ]
    # Go: the method's own receiver, a function of the same package in another file; the
    # imported standard package is outside the project (name-only).
    assert {(r["callee"], r["resolution"]) for r in go_callees["results"]} == {
        ("norm", "resolved"),
        ("TrimSpace", "name-only"),
    }
    assert sites(go_callers) == [("svc/store.go", 12, "Store.norm", "resolved")]
    # TypeScript: an imported function, and the same through a namespace import: the `pad`
    # of the module imported, not the other file's.
    assert sites(ts_callers) == [
        ("web/view.ts", 6, "View.show", "resolved"),
        ("web/view.ts", 9, "View.frame", "resolved"),
    ]
    assert {t for r in ts_callers["results"] for t in r["targets"]} == {"web/format.ts:1 pad"}
    assert refused.is_error and "direction" in refused.content[0].text


async def test_find_calls_is_listed_once_symbols_exist(sample, tmp_path):
    async with Client(build_mcp_server(Fathom(Settings(data_dir=tmp_path / "empty")))) as client:
        assert "find_calls" not in {t.name for t in (await client.list_tools()).tools}
    async with Client(build_mcp_server(Fathom(Settings(data_dir=sample[0])))) as client:
        assert "find_calls" in {t.name for t in (await client.list_tools()).tools}


async def test_find_calls_comes_and_goes_in_one_session_whoever_writes_the_symbols(tmp_path):
    """The check after every request reads the symbol table only when its files changed: a
    first index by this server, a drop by another writer of the data dir, an index by it
    again, each shows in the list at the next request."""
    from fathom.service.calls import has_symbols

    data = tmp_path / "data"
    root = write_project(tmp_path / "calls", FILES)
    here = Fathom(Settings(data_dir=data), encoder=hash_encoder())
    other = Fathom(Settings(data_dir=data), encoder=hash_encoder())  # another process's writes

    async def listed(client: Client) -> bool:
        return "find_calls" in {t.name for t in (await client.list_tools()).tools}

    async with Client(build_mcp_server(here)) as client:
        assert not await listed(client)
        await here.index(root, "calls")
        assert await listed(client) and has_symbols(here)
        await other.drop("calls")
        assert not await listed(client) and not has_symbols(other)
        await other.index(root, "calls")
        assert await listed(client)
        await here.drop("calls")
        assert not await listed(client)


def test_fathom_calls_on_the_command_line(sample):
    data, _ = sample
    runner = CliRunner()
    fathom = Fathom(Settings(data_dir=data))
    shown = runner.invoke(app, ["calls", "Console.print"], obj={"fathom": fathom}, env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "calls:app/console.py:12 [resolved] Console.log: self.print(text)" in shown.output
    as_json = runner.invoke(
        app, ["calls", "render", "--direction", "impact", "--json"], obj={"fathom": fathom}
    )
    assert as_json.exit_code == 0, as_json.output
    assert {r["caller"] for r in json.loads(as_json.output)["results"]} == {
        "Console.print",
        "Console.log",
        "report",
        "main",
    }
    refused = runner.invoke(app, ["calls", "render", "--depth", "9"], obj={"fathom": fathom})
    assert refused.exit_code != 0 and "depth 9 is out of range" in refused.output
    # The command's default depth (kept in the light CLI module) is the service's.
    from fathom.cli import calls as cli_calls
    from fathom.service import calls as service

    assert cli_calls.DEFAULT_DEPTH == service.DEFAULT_DEPTH


async def test_the_live_sync_keeps_callers_true_to_an_edited_file(tmp_path):
    async with watched(tmp_path, FILES) as (fathom, root):
        async with Client(build_mcp_server(fathom)) as client:

            async def callers() -> list:
                return sites(await call(client, "find_calls", name="render", project="shop"))

            assert ("app/report.py", 12, "report", "resolved") in await callers()
            report = root / "app" / "report.py"
            report.write_text(report.read_text().replace("    con.render('done')\n", ""))

            async def gone() -> bool:
                return all(s[0] != "app/report.py" for s in await callers())

            await wait_for(gone, what="the removed call gone from the callers")


async def test_a_symbol_table_of_an_older_layout_is_parsed_again(tmp_path):
    """A data dir whose symbols.sqlite an earlier Fathom wrote (uses without receivers, no
    imports, every project's digest recorded) answers graded calls at the first query."""
    import sqlite3

    from fathom.service import symbols

    root = write_project(tmp_path / "calls", FILES)
    fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=hash_encoder())
    await fathom.index(root, "calls")
    path = symbols.table_path(fathom)
    with sqlite3.connect(path) as conn:  # the layout before receivers and imports
        conn.executescript(
            "DROP TABLE refs; DROP TABLE imports; CREATE TABLE refs ("
            "project TEXT NOT NULL, path TEXT NOT NULL, name TEXT NOT NULL, "
            "line INTEGER NOT NULL, col INTEGER NOT NULL, use TEXT NOT NULL, "
            "enclosing TEXT); PRAGMA user_version = 0;"
        )
    symbols._tables.clear()  # as a new process finds it
    async with Client(build_mcp_server(Fathom(Settings(data_dir=tmp_path / "data")))) as client:
        callers = await call(client, "find_calls", name="Console.print")
    assert ("app/console.py", 12, "Console.log", "resolved") in sites(callers)
