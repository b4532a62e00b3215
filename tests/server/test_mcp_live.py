"""A real MCP client session over stdio with `fathom mcp`, no re-index asked for: appended
functions are found and deleted files disappear as the files change; the tools read as an
agent needs them to (filters, scores, one reason per response, docs that open on words);
`index_project` reports progress; `drop_project` removes a project."""

from __future__ import annotations

import asyncio
import functools
import sys
import time
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from fathom.config import Settings
from fathom.server.search_answer import Result
from fathom.service import Fathom
from tests.fleet.fleet_fixtures import wait_for
from tests.index.retrieval_fixtures import write_project

pytestmark = pytest.mark.slow

ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "FATHOM_WATCH": "1",
}


def stdio(data: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "fathom.cli", "--data-dir", str(data), "mcp", "--in-process", *extra],
        env=ENV,
    )


until = functools.partial(wait_for, timeout=60.0, interval=0.1)


async def search(client: Client, query: str, **args):
    result = await client.call_tool("search_code", {"query": query, "project": "shop", **args})
    assert not result.is_error, result.content[0].text
    return result.structured_content


@pytest.fixture
def indexed(tmp_path, local_encoder):
    root = write_project(tmp_path / "shop")
    data = tmp_path / "data"
    asyncio.run(Fathom(Settings(data_dir=data), encoder=local_encoder).index(root, "shop"))
    return data, root


async def test_stdio_session_follows_edits_and_deletes_without_a_reindex(indexed):
    data, root = indexed
    async with asyncio.timeout(300):
        async with Client(stdio(data), read_timeout_seconds=180) as client:
            await search(client, "warm up the model")

            async def watching():
                status = await client.call_tool("index_status", {"project": "shop"})
                return status.structured_content["watch"]["state"] == "watching"

            await until(watching, what="the project to be watched")
            latencies = []
            for path, name, doc in [
                ("net/retry.py", "jitter_delay", "Random jitter added to a retry delay."),
                ("billing/invoice.py", "invoice_due_date", "The date an invoice must be paid by."),
                ("auth/password.py", "password_strength", "Score how hard a password is to guess."),
            ]:
                started = time.monotonic()
                with (root / path).open("a") as fh:
                    fh.write(f'\n\ndef {name}(value):\n    """{doc}"""\n    return value\n')

                async def appended(name=name, doc=doc):
                    hits = (await search(client, doc, k=5))["results"]
                    return any(h["symbol"] == name for h in hits)

                await until(appended, what=f"{name} in search_code")
                latencies.append(time.monotonic() - started)

            started = time.monotonic()
            (root / "web" / "server.js").unlink()

            async def gone():
                hits = (await search(client, "HTTP server greets visitors", k=10))["results"]
                return all(h["path"] != "web/server.js" for h in hits)

            await until(gone, what="the deleted file to leave the results")
            deleted = time.monotonic() - started
            print(
                f"live sync over stdio: appended functions found after "
                f"{', '.join(f'{s:.2f}s' for s in latencies)}; deleted file gone after {deleted:.2f}s"
            )

            status = (await client.call_tool("index_status", {"project": "shop"})).structured_content
            assert status["watch"]["syncs"] >= 4 and status["watch"]["last_error"] is None
            assert all(j["reason"] == "sync" for j in status["jobs"])


async def test_tools_read_as_an_agent_needs(indexed, tmp_path):
    data, root = indexed
    other = write_project(
        tmp_path / "other",
        {
            f"lib/util_{i}.py": "".join(
                f"def helper_{i}_{j}(x):\n    return x + {j}\n\n\n" for j in range(15)
            )
            for i in range(10)
        },
    )
    async with asyncio.timeout(300):
        async with Client(stdio(data, "--no-watch"), read_timeout_seconds=180) as client:
            listed = (await client.list_tools()).tools
            by_name = {t.name: t for t in listed}
            assert by_name["drop_project"].annotations.destructive_hint is True
            assert by_name["search_code"].annotations.read_only_hint is True
            for tool in listed:
                assert tool.title, tool.name
                for name, prop in tool.input_schema.get("properties", {}).items():
                    assert prop.get("description"), f"{tool.name}.{name}"
            k = by_name["search_code"].input_schema["properties"]["k"]
            assert (k["minimum"], k["maximum"], k["default"]) == (1, 100, 10)

            found = await search(client, "hash a password", k=3)
            assert found["ordered_by"] == "fused_score" and found["reranked"] is False
            assert "reranker" in found["reason"]  # the whole response's reason, once
            top = found["results"][0]
            assert "reason" not in top and top["rank"] == 1
            assert top["fused_score"] > 0 and -1 <= top["cosine"] <= 1
            assert top["path"] == "auth/password.py" and top["kind"] == "function"
            # The listed result schema names the scores; what each means is described on the
            # wire model (the dashboard's schema), not in every agent's tool list.
            schema = by_name["search_code"].output_schema["$defs"]["Result"]["properties"]
            assert {"fused_score", "cosine", "rerank_score"} <= schema.keys()
            described = Result.model_json_schema()["properties"]
            assert (
                "fused" in described["fused_score"]["description"]
                and "normalised" in described["fused_score"]["description"]
            )
            assert "Cosine similarity" in described["cosine"]["description"]

            # Filters, inside the store: still k results when the filter is narrow.
            js = await search(client, "hash a password", k=3, language="javascript", group="chunk")
            assert len(js["results"]) == 3  # every JavaScript chunk, though none is about passwords
            assert {h["path"] for h in js["results"]} == {"web/server.js"}
            # One result per file by default: the file once, its other chunks as its ranges.
            one = await search(client, "hash a password", k=3, language="javascript")
            assert [h["path"] for h in one["results"]] == ["web/server.js"]
            assert len(one["results"][0]["also"]) == 2
            assert js["filters"] == "language javascript"
            classes = await search(client, "add up the totals", k=5, kind="class")
            assert [h["symbol"] for h in classes["results"]] == ["Invoice"]
            methods = await client.call_tool(
                "search_docs", {"query": "tax", "kind": "method", "group": "chunk"}
            )
            symbols = {h["symbol"] for h in methods.structured_content["results"]}
            assert {"Invoice.total", "Invoice.apply_tax"} <= symbols
            assert all(h["kind"] == "method" for h in methods.structured_content["results"])
            under = await search(client, "anything at all", k=5, path="auth/**")
            assert under["results"] and all(h["path"].startswith("auth/") for h in under["results"])
            bad = await client.call_tool("search_code", {"query": "x", "language": "klingon"})
            assert bad.is_error and "not a language Fathom indexes" in bad.content[0].text

            docs = await client.call_tool("search_docs", {"query": "hash a password", "k": 5})
            for hit in docs.structured_content["results"]:
                first = hit["snippet"].splitlines()[0]
                assert first.strip() and not first.lstrip().startswith(('"""', "'''")), hit

            similar = await client.call_tool(
                "find_similar", {"project": "shop", "path": "auth/password.py", "line": 9}
            )
            out = similar.structured_content
            assert out["ordered_by"] == "cosine" and out["results"][0]["fused_score"] is None
            assert out["results"][0]["cosine"] >= out["results"][-1]["cosine"]

            # index_project reports progress; drop_project removes the project again.
            events = []

            async def on_progress(progress, total, message):
                events.append((progress, total, message))

            indexed_other = await client.call_tool(
                "index_project",
                {"path": str(other), "project": "other", "wait": True},
                progress_callback=on_progress,
            )
            assert not indexed_other.is_error, indexed_other.content[0].text
            chunks = indexed_other.structured_content["embedded"]
            assert chunks >= 100
            assert events[0][2] == "opening store"  # start-up says what it does
            # How many events come between depends on how fast the chunks embed (the reporter
            # sends at most one per interval; a fast run may send none mid-way): the order holds.
            done = [e[0] for e in events]
            assert done == sorted(done), events
            last = events[-1]
            assert last[0] == last[1] == chunks and f"of {chunks} chunks embedded" in last[2]
            assert "chunks/s" in last[2]
            dropped = await client.call_tool("drop_project", {"project": "other"})
            assert not dropped.is_error and dropped.structured_content["rows"]["code"] == chunks
            names = (await client.call_tool("list_projects", {})).structured_content["projects"]
            assert [p["name"] for p in names] == ["shop"]
            again = await client.call_tool("drop_project", {"project": "other"})
            assert again.is_error and "no project 'other'" in again.content[0].text

            # ask is not listed here (no LLM route); called anyway, it says what to configure.
            assert "ask" not in by_name
            asked = await client.call_tool("ask", {"question": "how are passwords hashed?"})
            assert asked.is_error and "FATHOM_LOCAL_CHAT_URL" in asked.content[0].text


async def test_serve_over_http_follows_edits_without_a_reindex(indexed):
    # `fathom serve` (its own app, behind the same guard as the server) watches too.
    import socket
    import subprocess

    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    data, root = indexed
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fathom.cli",
            "--data-dir",
            str(data),
            "serve",
            "--no-auth",
            "--port",
            str(port),
        ],
        env=ENV,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(300):

            async def up():
                assert server.poll() is None, server.stderr.read().decode()
                try:
                    async with httpx2.AsyncClient() as http:
                        await http.get(f"http://127.0.0.1:{port}/mcp", timeout=2)
                    return True
                except httpx2.TransportError:
                    return False

            await until(up, timeout=180, what="fathom serve to listen")
            async with (
                httpx2.AsyncClient(timeout=120) as http,
                Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)) as client,
            ):

                async def watching():
                    status = await client.call_tool("index_status", {"project": "shop"})
                    return status.structured_content["watch"]["state"] == "watching"

                await until(watching, what="the project to be watched")
                with (root / "net" / "retry.py").open("a") as fh:
                    fh.write(
                        '\n\ndef jitter_delay(value):\n    """Random jitter added to a retry '
                        'delay."""\n    return value\n'
                    )

                async def appended():
                    hits = await search(client, "Random jitter added to a retry delay.", k=5)
                    return any(h["symbol"] == "jitter_delay" for h in hits["results"])

                await until(appended, what="jitter_delay in search_code over HTTP")
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)
