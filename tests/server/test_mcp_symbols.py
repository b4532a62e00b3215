"""`find_symbol`, `find_references` and `outline` through the MCP SDK's own client, on httpx's
installed source indexed for real: each answer matches what an independent `ast` walk of the
same files finds; answers hold to `max_tokens` and page with a cursor; the live sync keeps the
symbols true to an edited file; a token scoped to one project sees no other's symbols.

Symbols never read a vector, so the index is embedded by the hash encoder at the Provider
cut-off (as the operator server's tests do): the store, chunker, watcher and server are real.
"""

from __future__ import annotations

import ast
import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client

from fathom import scope
from fathom.config import Settings
from fathom.errors import ConfigError
from fathom.index.store import UnknownProject
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom, symbols
from tests.fleet.fleet_fixtures import ADMIN
from tests.index.retrieval_fixtures import write_project
from tests.index.symbol_fixtures import EXPECTED, FIXTURES
from tests.index.watch_fixtures import hash_encoder, settled, wait_for, watched
from tests.server.admin_fixtures import Operator
from tests.server.mcp_fixtures import create, mcp

pytestmark = pytest.mark.slow

HTTPX = Path(httpx.__file__).parent


@pytest.fixture(scope="module")
def httpx_index(tmp_path_factory):
    """httpx's installed source, copied and indexed once for the module."""
    base = tmp_path_factory.mktemp("symbols")
    root = base / "httpx"
    shutil.copytree(HTTPX, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    fathom = Fathom(Settings(data_dir=base / "data"), encoder=hash_encoder())
    asyncio.run(fathom.index(root, "httpx"))
    return fathom, root


# ---- the independent walk: Python's own parser over the same files


def ast_definitions(source: str) -> list[tuple[str, str, int, int]]:
    """(qualified name, kind, first line, last line) of every def and class, in order."""
    found: list[tuple[str, str, int, int]] = []

    def visit(node: ast.AST, scope: str | None, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{scope}.{child.name}" if scope else child.name
                is_class = isinstance(child, ast.ClassDef)
                kind = "class" if is_class else "method" if in_class else "function"
                found.append((name, kind, child.lineno, child.end_lineno or child.lineno))
                visit(child, name, is_class)
            else:
                visit(child, scope, in_class)

    visit(ast.parse(source), None, False)
    return sorted(found, key=lambda d: d[2])


def ast_references(source: str, name: str) -> list[tuple[int, str, str | None]]:
    """(line, use, enclosing definition) of every use of `name`: a called name or attribute
    is a call, an imported one an import, any other a mention."""
    found: list[tuple[int, str, str | None]] = []

    def visit(node: ast.AST, scope: str | None, use: str | None) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            # Decorators belong to the scope around a definition; its head and body to it.
            for part in node.decorator_list:
                visit(part, scope, None)
            inner = f"{scope}.{node.name}" if scope else node.name
            for part in ast.iter_child_nodes(node):
                if part not in node.decorator_list:
                    visit(part, inner, None)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            module = getattr(node, "module", None) or ""
            found.extend((node.lineno, "import", scope) for part in module.split(".") if part == name)
            for alias in node.names:
                parts = alias.name.split(".") + ([alias.asname] if alias.asname else [])
                found.extend((alias.lineno, "import", scope) for part in parts if part == name)
            return
        here = None
        if isinstance(node, ast.Name) and node.id == name:
            here = node.lineno
        elif isinstance(node, ast.Attribute) and node.attr == name:
            here = node.end_lineno
        elif isinstance(node, ast.arg | ast.keyword) and node.arg == name:
            here = node.lineno
        if here is not None:
            found.append((here, use or "mention", scope))
        for child in ast.iter_child_nodes(node):
            called = isinstance(node, ast.Call) and child is node.func
            visit(child, scope, "call" if called else None)

    visit(ast.parse(source), None, None)
    return sorted(found)


def outline_of(result: Any) -> list[tuple[str, str, int, int]]:
    return [
        (e["qualname"], e["kind"], e["start_line"], e["end_line"])
        for e in result.structured_content["results"]
    ]


async def test_symbols_on_httpx_match_an_ast_walk_of_the_same_files(httpx_index):
    fathom, root = httpx_index
    client_py = (root / "_client.py").read_text()
    expected_defs = ast_definitions(client_py)
    async with Client(build_mcp_server(fathom)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for name in ("find_symbol", "find_references", "outline"):
            assert tools[name].annotations.read_only_hint is True
            assert "max_tokens" in tools[name].input_schema["properties"]

        # find_symbol: the one definition the walk finds, with its signature and lines.
        found = await client.call_tool("find_symbol", {"name": "AsyncClient.send"})
        assert not found.is_error, found.content[0].text
        want = [d for d in expected_defs if d[0] == "AsyncClient.send"]
        assert len(want) == 1
        got = [
            (r["path"], r["qualname"], r["kind"], r["start_line"], r["end_line"])
            for r in found.structured_content["results"]
        ]
        assert got == [("_client.py", *want[0])]
        hit = found.structured_content["results"][0]
        assert hit["signature"].startswith("async def send(") and "-> Response" in hit["signature"]
        # A bare name finds every definition of it, in every file.
        every = await client.call_tool("find_symbol", {"name": "send", "project": "httpx"})
        expected_sends = sorted(
            (p.relative_to(root).as_posix(), d[0])
            for p in root.rglob("*.py")
            for d in ast_definitions(p.read_text())
            if d[0].rsplit(".", 1)[-1] == "send"
        )
        assert (
            sorted((r["path"], r["qualname"]) for r in every.structured_content["results"]) == expected_sends
        )
        classes = await client.call_tool("find_symbol", {"name": "send", "kind": "class"})
        assert classes.structured_content["results"] == []

        # find_references: every use the walk finds, across the project, calls first.
        refs = await client.call_tool("find_references", {"name": "_merge_cookies"})
        assert not refs.is_error, refs.content[0].text
        expected_refs = sorted(
            (p.relative_to(root).as_posix(), *r)
            for p in root.rglob("*.py")
            for r in ast_references(p.read_text(), "_merge_cookies")
        )
        got_refs = [
            (r["path"], r["line"], r["use"], r["enclosing"]) for r in refs.structured_content["results"]
        ]
        assert expected_refs and sorted(got_refs) == expected_refs
        for common in ("Request", "_merge_headers", "URL"):  # calls, imports and mentions
            many = await client.call_tool("find_references", {"name": common, "max_tokens": 20000})
            rows = many.structured_content["results"]
            assert sorted((r["path"], r["line"], r["use"], r["enclosing"]) for r in rows) == sorted(
                (p.relative_to(root).as_posix(), *r)
                for p in root.rglob("*.py")
                for r in ast_references(p.read_text(), common)
            ), common
            # Resolved first, then likely, then name-only; calls first within each.
            order = [
                (
                    ["resolved", "likely", "name-only"].index(r["resolution"]),
                    ["call", "import", "mention"].index(r["use"]),
                )
                for r in rows
            ]
            assert order == sorted(order)

        # outline: the file's definitions, in order, as the walk finds them.
        outline = await client.call_tool("outline", {"path": "_client.py", "max_tokens": 20000})
        assert not outline.is_error, outline.content[0].text
        assert outline_of(outline) == expected_defs
        assert outline.structured_content["next_cursor"] is None


async def test_answers_hold_to_max_tokens_and_page_with_a_cursor(httpx_index):
    fathom, root = httpx_index
    expected = ast_definitions((root / "_client.py").read_text())
    async with Client(build_mcp_server(fathom)) as client:
        pages: list[Any] = []
        args: dict[str, Any] = {"path": "httpx._client", "project": "httpx", "max_tokens": 1000}
        while True:
            page = await client.call_tool("outline", args)
            assert not page.is_error, page.content[0].text
            sent = json.dumps(page.model_dump(mode="json", by_alias=True, exclude_unset=True))
            assert page.structured_content["tokens"] <= 1000 and len(sent) < 1000 * 6
            pages.append(page)
            if page.structured_content["next_cursor"] is None:
                break
            args["cursor"] = page.structured_content["next_cursor"]
        assert len(pages) > 2
        assert [d for p in pages for d in outline_of(p)] == expected
        # A cursor given with other arguments is refused, naming the fix.
        first = pages[0].structured_content["next_cursor"]
        other = await client.call_tool("outline", {"path": "_models.py", "cursor": first})
        assert other.is_error and "another search" in other.content[0].text
        refs = await client.call_tool("find_references", {"name": "self", "max_tokens": 1000})
        assert refs.structured_content["next_cursor"] and refs.structured_content["tokens"] <= 1000
        for bad, needle in (
            ({"name": "AsyncClient send"}, "not an identifier"),
            ({"name": "send", "language": "cobol"}, "no symbols"),
            ({"name": "send", "project": "ghost"}, "no project 'ghost'"),
        ):
            res = await client.call_tool("find_symbol", bad)
            assert res.is_error and needle in res.content[0].text, res.content[0].text
        missing = await client.call_tool("outline", {"path": "nowhere.py"})
        assert missing.is_error and "no indexed code file" in missing.content[0].text
    # Below the MCP endpoint too: inside another scope, the project is no project at all.
    with scope.within({"elsewhere"}):
        for ask in (
            lambda: symbols.find_symbol(fathom, "send", project="httpx"),
            lambda: symbols.find_references(fathom, "send", project="httpx"),
            lambda: symbols.outline(fathom, "_client.py", project="httpx"),
        ):
            with pytest.raises(UnknownProject, match="no project 'httpx'"):
                ask()
        with pytest.raises(ConfigError, match="no project is indexed"):
            symbols.find_symbol(fathom, "send")


@pytest.mark.parametrize("backend", ["lancedb", "postgresql"])
async def test_every_language_fixture_indexed_answers_its_symbols(backend, tmp_path, request):
    """The fixtures of tests/fixtures/symbols through the real indexer and store (LanceDB and
    PostgreSQL alike), read back as the MCP tools answer them."""
    root = tmp_path / "shapes"
    shutil.copytree(FIXTURES, root)
    url = request.getfixturevalue("pg_url") if backend == "postgresql" else None
    fathom = Fathom(Settings(data_dir=tmp_path / "data", store_url=url), encoder=hash_encoder())
    try:
        await fathom.index(root, "shapes")
        async with Client(build_mcp_server(fathom)) as client:
            for name, (definitions, uses) in EXPECTED.items():
                outline = await client.call_tool("outline", {"path": name, "project": "shapes"})
                assert not outline.is_error, outline.content[0].text
                assert outline_of(outline) == definitions, name
                qualname, kind, start, end = definitions[-1]
                found = await client.call_tool("find_symbol", {"name": qualname, "kind": kind})
                assert (name, start, end) in {
                    (r["path"], r["start_line"], r["end_line"]) for r in found.structured_content["results"]
                }
                called, _, line, enclosing = next(u for u in uses if u[1] == "call")
                refs = await client.call_tool("find_references", {"name": called})
                assert {"path": name, "line": line, "use": "call", "enclosing": enclosing} in [
                    {k: r[k] for k in ("path", "line", "use", "enclosing")}
                    for r in refs.structured_content["results"]
                ], (name, called)
    finally:
        await fathom.aclose()


async def test_a_damaged_project_is_left_out_and_named(tmp_path):
    fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=hash_encoder())
    for name in ("good", "bad"):
        await fathom.index(
            write_project(tmp_path / name, {"app.py": f"def {name}_one():\n    return 1\n"}), name
        )
    # A truncated data file: found only when the table is read, not when projects are listed.
    state = json.loads((tmp_path / "data/lance/projects/bad/state.json").read_text())
    table = tmp_path / f"data/lance/projects/bad/{state['tables']['code']['active']}.lance"
    for data in (table / "data").glob("*.lance"):
        data.write_bytes(data.read_bytes()[: len(data.read_bytes()) // 2])
    await fathom.aclose()
    fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=hash_encoder())  # no cache
    try:
        async with Client(build_mcp_server(fathom)) as client:
            every = await client.call_tool("find_symbol", {"name": "good_one"})
            assert not every.is_error, every.content[0].text
            assert [r["project"] for r in every.structured_content["results"]] == ["good"]
            assert ["bad" in n and "--repair" in n for n in every.structured_content["notes"]] == [True]
            named = await client.call_tool("find_symbol", {"name": "bad_one", "project": "bad"})
            assert named.is_error and "damaged" in named.content[0].text
    finally:
        await fathom.aclose()


async def test_the_live_sync_keeps_symbols_true_to_an_edited_file(tmp_path):
    async with watched(tmp_path) as (fathom, root):
        async with Client(build_mcp_server(fathom)) as client:

            async def lines_of(name: str) -> list[int]:
                res = await client.call_tool("find_symbol", {"name": name, "project": "shop"})
                return [r["start_line"] for r in res.structured_content["results"]]

            assert await lines_of("compute_invoice_discount") == []
            retry = root / "net" / "retry.py"
            before = retry.read_text()
            retry.write_text(
                "def compute_invoice_discount(total, rate):\n    return total * (1 - rate)\n\n\n" + before
            )
            await wait_for(lambda: lines_of("compute_invoice_discount"), what="the new function")
            assert await lines_of("compute_invoice_discount") == [1]
            # Every definition below it moved with it, as the file now reads.
            await settled(fathom)
            outline = await client.call_tool("outline", {"path": "net/retry.py"})
            assert outline_of(outline) == ast_definitions(retry.read_text())
            retry.write_text(before)
            await wait_for(
                lambda: _absent(lines_of("compute_invoice_discount")), what="the function gone again"
            )
        # Dropping the project drops its symbols, and the text of its files, with it.
        assert symbols.table_of(fathom).files(["shop"])
        await fathom.drop("shop")
        assert symbols.table_of(fathom).files(["shop"]) == []


async def _absent(pending: Any) -> bool:
    return await pending == []


async def test_a_scoped_token_sees_no_other_projects_symbols(team: Operator):
    async with team.client() as admin:
        alice = await create(admin, "alice", ["alpha"])
    async with mcp(team.url, ADMIN) as operator:
        seen = await operator.call_tool("find_symbol", {"name": "secret_beta_function"})
        assert [r["project"] for r in seen.structured_content["results"]] == ["beta"]
    async with mcp(team.url, alice) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"find_symbol", "find_references", "outline"} <= names
        # "Every project" is every project of the token: beta's symbols are not there.
        for tool, args in (
            ("find_symbol", {"name": "secret_beta_function"}),
            ("find_references", {"name": "code"}),
        ):
            every = await client.call_tool(tool, args)
            assert not every.is_error, every.content[0].text
            assert every.structured_content["results"] == []  # beta's alone hold them
            assert "vault.py" not in json.dumps(every.model_dump(mode="json"))
        own = await client.call_tool("find_symbol", {"name": "add"})
        assert [(r["project"], r["path"]) for r in own.structured_content["results"]] == [("alpha", "app.py")]
        # Named, it is "no such project", by every tool alike.
        for tool, args in (
            ("find_symbol", {"name": "secret_beta_function", "project": "beta"}),
            ("find_references", {"name": "code", "project": "beta"}),
            ("outline", {"path": "vault.py", "project": "beta"}),
            ("outline", {"path": "vault.py"}),
        ):
            refused = await client.call_tool(tool, args)
            assert refused.is_error, (tool, args)
            sent = json.dumps(refused.model_dump(mode="json"))
            assert "beta only" not in sent and "secret_beta_function(code)" not in sent
            said = refused.content[0].text
            assert any(
                words in said
                for words in ("not one this token may see", "no project 'beta'", "no indexed code file")
            )
