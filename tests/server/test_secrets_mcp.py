"""Nothing secret reaches an agent, and the code beside a key does: a project holding every
kind of credential file and code and config with keys of every rule family embedded beside
ordinary functions is indexed by the real server (admin API on 127.0.0.1), then read back
through everything that serves text, with the admin token and with a read-only scoped token,
over a real MCP session (streamable HTTP): `search_code` / `search_docs` given each secret's
own text as the query, `read_code` and the `fathom://` resource of every file that held a key,
`outline` of each, `find_symbol` of the functions beside the keys, `explore`'s `grep` and
`read_file` (a scripted local model calling them), and the admin API's `/admin/search` route.
None of them serves a secret; the functions beside the keys are found by `search_code` and
`find_symbol`. The job's report names the credential files left out (`secrets`) and the files
redacted (`redacted`); a `!path` line in `.fathomignore` takes one back, whole.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from fathom.inference.provider import ChatResult
from tests.agents.agents_fixtures import LocalChat, tool_turn
from tests.fleet.fleet_fixtures import ADMIN, serve_in_loop
from tests.index.secret_fixtures import SecretProject, assert_serves_none, write_secret_project
from tests.server.admin_fixtures import Operator, build_operator_app

# What `explore`'s scripted model reads: every redacted line, every line a raw key would
# match, and whole files with keys split over lines, in config, beside functions.
READS = (
    "src/signing_split.py",
    "web/signing_split.js",
    "src/more_tokens.py",
    "config/database.yml",
    "config/app.json",
    "src/keys_private_key.py",
    "src/keys_azure_storage_key.py",
)
# (A pattern is echoed back to the model: it names no secret text itself.)
GREPS = ("REDACTED", r"gh[pousr]_|sk-|AKIA|xox|SG\.|do[por]_v1|webhooks|AccountKey|PRIVATE.KEY|passw")


def explore_script() -> list[ChatResult]:
    return [
        *(tool_turn("grep", pattern=p) for p in GREPS),
        *(tool_turn("read_file", path=p) for p in READS),
        ChatResult(content="Keys are redacted (src/signing_split.py:1).", usage={"total_tokens": 10}),
    ]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[tuple[Operator, LocalChat]]:
    chat = LocalChat(explore_script())
    app = build_operator_app(tmp_path / "data", chat=chat)
    async with serve_in_loop(app) as url:
        yield Operator(url, app, tmp_path / "data", tmp_path), chat


def mcp(url: str, token: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return Client(streamable_http_client(f"{url}/mcp", http_client=http))


async def index(op: Operator, root: Path) -> dict[str, Any]:
    async with op.client() as admin:
        r = await admin.post("/admin/jobs", json={"path": str(root), "project": "vault"})
        assert r.status_code in (200, 201, 202), r.text
        job = await op.wait_job(admin, r.json()["id"])
    assert job["state"] == "done", job
    return job


def queries(needle: str) -> list[str]:
    """The secret's text as a query: whole, and its longest line (a key block's body line)."""
    lines = [ln for ln in needle.splitlines() if ln.strip()]
    return list(dict.fromkeys([needle[:500], max(lines, key=len)[:500]]))


async def served(client: Client, query: str) -> str:
    """Everything two searches over the project answer, as text (less the query they echo)."""
    out = []
    for tool in ("search_code", "search_docs"):
        result = await client.call_tool(tool, {"query": query, "project": "vault", "k": 50})
        assert not result.is_error, result.content[0].text
        answer = dict(result.structured_content or {})
        assert answer.pop("query", query) == query
        out.append(json.dumps(answer))
    return "\n".join(out)


def text_of(result: Any) -> str:
    """All a tool's answer carries: its text blocks and its structured content."""
    blocks = [getattr(c, "text", "") for c in result.content]
    return "\n".join([*blocks, json.dumps(result.structured_content or {})])


def assert_none_in(answer: str, planted: SecretProject, where: str) -> None:
    assert_serves_none(answer, planted.secrets, where)


async def read_back_every_redacted_file(client: Client, planted: SecretProject) -> None:
    """`read_code`, the `fathom://` resource and `outline` of every file that held a key: the
    code is there, at its lines, agreeing with the disk; no secret is."""
    for rel, beside in planted.beside.items():
        read = await client.call_tool("read_code", {"project": "vault", "path": rel, "max_tokens": 20000})
        assert not read.is_error, read.content[0].text
        answer = text_of(read)
        assert_none_in(answer, planted, f"read_code {rel}")
        assert beside in answer and "[REDACTED:" in answer, rel
        # Read back through the walker, the disk gives the same redacted lines: unchanged.
        assert read.structured_content["on_disk"] == "unchanged", rel
        resource = await client.read_resource(f"fathom://vault/{rel}")
        assert_none_in(resource.contents[0].text, planted, f"resource {rel}")
        if rel.endswith((".py", ".js")):
            outline = await client.call_tool(
                "outline", {"path": rel, "project": "vault", "max_tokens": 20000}
            )
            assert not outline.is_error, outline.content[0].text
            assert_none_in(text_of(outline), planted, f"outline {rel}")
            assert beside in text_of(outline), rel


async def find_what_lies_beside_the_keys(client: Client, planted: SecretProject) -> None:
    for rel, beside in planted.beside.items():
        assert f'"path": "{rel}"' in await served(client, beside), rel
        if rel.endswith((".py", ".js")):
            found = await client.call_tool("find_symbol", {"name": beside, "project": "vault"})
            assert not found.is_error, found.content[0].text
            assert [r["path"] for r in found.structured_content["results"]] == [rel], beside
            assert_none_in(text_of(found), planted, f"find_symbol {beside}")


@pytest.mark.slow  # a minute: every secret asked for, every file read back, both tokens
async def test_no_secret_is_served_by_any_tool_resource_or_route_and_the_code_beside_is(
    server: tuple[Operator, LocalChat],
):
    op, chat = server
    root = op.tmp / "vault"
    planted = write_secret_project(root)
    job = await index(op, root)
    assert job["report"]["skipped"]["secret"] == len(planted.credential_files)
    assert job["report"]["secrets"] == planted.credential_files
    assert job["report"]["redacted"] == planted.redacted_files
    async with op.client() as admin:
        r = await admin.post("/admin/tokens", json={"name": "reader", "projects": ["vault"]})
        assert r.status_code == 201, r.text
        reader = r.json()["token"]

    for token in (ADMIN, reader):
        async with mcp(op.url, token) as client:
            for rel, word in planted.plain.items():  # the index answers: what is not secret is found
                assert rel in await served(client, word), rel
            await find_what_lies_beside_the_keys(client, planted)
    # Every secret asked for by its own text (the admin token searches the same index: below,
    # through the HTTP route); every file that held one read back.
    async with mcp(op.url, reader) as client:
        for needle in planted.secrets:
            for query in queries(needle):
                assert_none_in(await served(client, query), planted, "search")
        for rel, needle in planted.by_name.items():
            assert f'"path": "{rel}"' not in await served(client, needle), rel
        await read_back_every_redacted_file(client, planted)
        explored = await client.call_tool(
            "explore", {"question": "where are the keys?", "project": "vault", "max_steps": 12}
        )
    assert not explored.is_error, explored.content[0].text
    trace = explored.structured_content["trace"]
    assert [t["tool"] for t in trace] == ["grep"] * len(GREPS) + ["read_file"] * len(READS)
    assert all(t["ok"] for t in trace), trace
    # What the model was shown: the code and the markers, no secret.
    shown = "\n".join(str(m.get("content") or "") for request in chat.requests for m in request)
    assert_none_in(shown + text_of(explored), planted, "explore")
    assert "[REDACTED:private-key]" in shown and "upload_report_to_bucket" in shown
    # The admin API's search route: the same index, the same answer.
    async with op.client() as admin:
        for needle in planted.secrets:
            for table in ("code", "docs"):
                r = await admin.post(
                    "/admin/search", json={"query": needle[:500], "project": "vault", "table": table, "k": 50}
                )
                assert r.status_code == 200, r.status_code
                answer = r.json()
                assert answer.pop("query") == needle[:500]  # the query it echoes
                assert_none_in(json.dumps(answer), planted, "/admin/search")


async def test_a_fathomignore_line_takes_a_file_back_whole(server: tuple[Operator, LocalChat]):
    op, _ = server
    root = op.tmp / "vault"
    planted = write_secret_project(root)
    # The operator takes two back, by name: they are read, indexed and served as written.
    (root / ".fathomignore").write_text("!config/database.yml\n!src/keys_openrouter_key.py\n!.env\n")
    job = await index(op, root)
    assert job["report"]["skipped"]["secret"] == len(planted.credential_files) - 1
    assert {"config/database.yml", "src/keys_openrouter_key.py"}.isdisjoint(job["report"]["redacted"])
    async with op.client() as admin:
        r = await admin.post("/admin/tokens", json={"name": "reader", "projects": ["vault"]})
        reader = r.json()["token"]
    async with mcp(op.url, reader) as client:
        for rel in ("config/database.yml", "src/keys_openrouter_key.py"):
            secret = planted.redacted[rel][0]
            assert secret in await served(client, secret), rel
        assert planted.by_name[".env"] in await served(client, planted.by_name[".env"])
        # The rest stay out, or redacted.
        for rel in ("src/keys_github_token.py", "config/app.json"):
            read = await client.call_tool("read_code", {"project": "vault", "path": rel})
            assert_serves_none(text_of(read), planted.redacted[rel], rel)
        stripe = planted.by_name[".env.production"]
        assert_serves_none(await served(client, stripe), [stripe], ".env.production")
