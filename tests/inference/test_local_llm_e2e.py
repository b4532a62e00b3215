"""Local LLMs for ask and explore, end to end on loopback with real processes: the scripted
OpenAI-compatible server (standing in for Ollama / vLLM, streaming and tool calls), a fathom
server, a sidecar fronting the local server for code-assistant, rlm and the reranker, the
OpenRouter emulator, and a standalone `fathom mcp` — every one a separate process.

1. Through the server's MCP at /mcp: `ask` answers from the sidecar's local LLM citing real
   files; `explore` completes a loop of three tool calls; search is reranked by the sidecar's
   OpenAI-compatible /v1/rerank.
2. Through a standalone `fathom mcp` with FATHOM_LOCAL_CHAT_URL: the same, with no server; and
   without the variable, neither tool is listed.
3. The rlm role under local-only, with the key pushed and the emulator healthy, sends nothing to
   the emulator; switched to the cloud (the control), its requests do reach it, so the count
   can see them.

Every wait is bounded; every process is stopped at the end, by its own pid.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from fathom.config import Settings
from fathom.devtools.emulator import EmulatorControl
from fathom.roles import DEFAULTS, Role
from fathom.service import Fathom
from tests.fleet.fleet_fixtures import (
    ADMIN,
    JOIN,
    PY,
    ProcessGroup,
    free_port,
    mcp_calls,
    server_mcp,
    spawn_sidecar,
    wait_http,
    wait_until,
)
from tests.index.retrieval_fixtures import write_project
from tests.server.localserver_fixtures import MODEL, spawn_local_llm

pytestmark = pytest.mark.slow

KEY = "sk-or-v1-local-llm-e2e-key"
SIDECAR = "gpu"
ASK_TURN = {"match": "Context:", "content": "Passwords are salted and hashed with PBKDF2 [1]."}
EXPLORE = [
    {"tool_calls": [{"name": "search_code", "arguments": {"query": "password hashing"}}]},
    {"tool_calls": [{"name": "grep", "arguments": {"pattern": "compare_digest"}}]},
    {
        "tool_calls": [
            {"name": "read_file", "arguments": {"path": "auth/password.py", "start_line": 15, "end_line": 19}}
        ]
    },
    {"content": "Hashed with PBKDF2 and checked in constant time (auth/password.py:15-19)."},
]


def check_ask(answer: dict[str, Any], root: Path) -> None:
    assert answer["answer"] == ASK_TURN["content"]
    assert answer["citations"], answer
    for cited in answer["citations"]:  # each a real file, lines that exist
        path, lines = cited.rsplit(":", 1)
        start, _, end = lines.partition("-")
        text = (root / path).read_text().splitlines()
        assert 1 <= int(start) <= int(end or start) <= len(text)
    assert answer["citations"][0].startswith("auth/password.py:")


def check_explore(e: dict[str, Any]) -> None:
    assert e["complete"], e["answer"]
    assert [t["tool"] for t in e["trace"]] == ["search_code", "grep", "read_file"]
    assert all(t["ok"] for t in e["trace"]) and e["citations"] == ["auth/password.py:15-19"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("local-llm-e2e")
    group = ProcessGroup(base / "logs")
    admin = None
    try:
        port, emu_port = free_port(), free_port()
        server = group.spawn(
            "server",
            [
                PY,
                "-m",
                "fathom.server",
                "--port",
                str(port),
                "--data-dir",
                str(base / "data"),
                "--log-level",
                "INFO",
            ],
            env={"FATHOM_JOIN_TOKEN": JOIN, "FATHOM_ADMIN_TOKEN": ADMIN},
        )
        emulator = group.spawn("emulator", [PY, "-m", "fathom.devtools.emulator", "--port", str(emu_port)])
        llm = spawn_local_llm(group, free_port())
        wait_http(f"http://127.0.0.1:{port}/healthz", proc=server)
        wait_http(f"http://127.0.0.1:{emu_port}/control/state", proc=emulator)
        serve = [
            f"{role}=openai-compatible:{llm.base_url},model={MODEL}"
            for role in ("code-assistant", "rlm", "reranker")
        ]
        sidecar = spawn_sidecar(
            group, SIDECAR, port, serve, extra=["--openrouter-url", f"http://127.0.0.1:{emu_port}/api/v1"]
        )
        admin = httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120
        )
        procs = [server, emulator, sidecar]

        def states() -> dict[str, str]:
            return {
                s["name"]: s["state"] for s in admin.get("/admin/fleet").json()["sidecars"] if s["connected"]
            }

        wait_until(lambda: states().get(SIDECAR) == "pending", "the sidecar to connect", procs=procs)
        assert admin.post(f"/admin/fleet/{SIDECAR}/approve").json()["state"] == "approved"
        root = write_project(base / "shop")
        job = admin.post("/admin/jobs", json={"path": str(root), "project": "shop"})
        assert job.status_code == 202, job.text
        view = wait_until(
            lambda: (
                (v := admin.get(f"/admin/jobs/{job.json()['id']}").json())["state"] in ("done", "failed")
                and v
            ),
            "the index job",
            procs=procs,
        )
        assert view["state"] == "done", view
        yield {
            "url": f"http://127.0.0.1:{port}",
            "admin": admin,
            "llm": llm,
            "root": root,
            "procs": procs,
            "emulator": EmulatorControl(f"http://127.0.0.1:{emu_port}"),
        }
    finally:
        if admin is not None:
            admin.close()
        group.stop()


def test_a_sidecar_fronting_a_local_llm_answers_ask_and_explore_over_mcp(fleet):
    routes = {
        r["role"]: r for s in fleet["admin"].get("/admin/fleet").json()["sidecars"] for r in s["routes"]
    }
    assert {r: (routes[r]["backend"], routes[r]["model"]) for r in ("code-assistant", "rlm", "reranker")} == {
        r: ("openai-compatible", MODEL) for r in ("code-assistant", "rlm", "reranker")
    }
    llm = fleet["llm"]
    llm.control.reset()
    llm.control.script([ASK_TURN, *EXPLORE])

    found, asked, explored = server_mcp(
        fleet["url"],
        ("search_code", {"query": "verify a password in constant time", "project": "shop", "k": 3}),
        ("ask", {"question": "how are passwords stored?", "project": "shop"}),
        ("explore", {"question": "how are passwords checked?", "project": "shop"}),
    )

    assert found["reranked"] is True, found["reason"]  # by the sidecar's /v1/rerank
    check_ask(asked, fleet["root"])
    assert asked["provider"] == f"sidecar:{SIDECAR}:code-assistant:local" and asked["reranked"] is True
    check_explore(explored)
    sent = [r for r in llm.control.requests() if r["endpoint"] == "chat"]
    assert len(sent) == 5 and all(r["stream"] for r in sent)  # streamed, behind the sidecar
    assert all(r["tools"] for r in sent[1:]) and sent[0]["tools"] is None  # explore's tools, passed through
    assert llm.control.counters()["requests"]["rerank"] >= 2


def test_rlm_under_local_only_sends_nothing_to_the_cloud_with_a_key_pushed(fleet):
    admin, emulator, llm = fleet["admin"], fleet["emulator"], fleet["llm"]
    emulator.reset()
    push = admin.post("/admin/key", json={"key": KEY}).json()
    assert push["acked"] == [SIDECAR], push
    rlm = admin.get("/admin/policies").json()["roles"]["rlm"]
    assert (rlm["policy"], rlm["fallback"], rlm["model"]) == (
        "aggregate",
        "local-only",
        DEFAULTS[Role.RLM].model,
    )
    emulator.script([{"content": "from the cloud"}])  # healthy, and willing to answer

    llm.control.reset()
    llm.control.script(EXPLORE)
    (explored,) = server_mcp(
        fleet["url"], ("explore", {"question": "how are passwords checked?", "project": "shop"})
    )
    check_explore(explored)
    assert llm.control.counters()["requests"]["chat"] == 4
    # Not one request reached the cloud: no chat, and no rerank for its searches either (the
    # reranker role may use the cloud, but not for a local-only exploration). Key discovery
    # (GET /key, /credits) is the key's, not the role's, and is left out of the count.
    counters = emulator.counters()
    assert {k: v for k, v in counters["requests"].items() if k not in ("key", "credits")} == {}, counters

    # The control: allowed the cloud, the same explore reaches the emulator, so the count above
    # could have seen a leak.
    r = admin.put("/admin/policies", json={"rlm": {"policy": "cloud", "fallback": "any"}})
    assert r.status_code == 200, r.text
    wait_until(
        lambda: any(
            p["id"].endswith(":rlm:cloud:auto") and p["serving"]
            for p in admin.get("/admin/policies").json()["roles"]["rlm"]["providers"]
        ),
        "the sidecar's cloud route for rlm",
        procs=fleet["procs"],
        timeout=30,
    )
    try:
        (cloud,) = server_mcp(fleet["url"], ("explore", {"question": "anything", "project": "shop"}))
        assert cloud["answer"] == "from the cloud"
        assert emulator.counters()["requests"].get("chat") == 1
    finally:
        admin.put("/admin/policies", json={"rlm": {"policy": "aggregate", "fallback": "local-only"}})


def test_standalone_fathom_mcp_uses_the_local_llm_named_by_the_environment(fleet, tmp_path, local_encoder):
    root = write_project(tmp_path / "shop")
    data = tmp_path / "data"
    asyncio.run(Fathom(Settings(data_dir=data), encoder=local_encoder).index(root, "shop"))
    llm = fleet["llm"]
    llm.control.reset()
    llm.control.script([ASK_TURN, *EXPLORE])
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}

    async def session(extra: dict[str, str], calls) -> tuple[set[str], list[dict[str, Any]]]:
        argv = ["-m", "fathom.cli", "--data-dir", str(data), "mcp", "--in-process"]
        params = StdioServerParameters(command=sys.executable, args=argv, env={**env, **extra})
        async with asyncio.timeout(240), Client(params, read_timeout_seconds=180) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            return names, await mcp_calls(client, calls)

    names, (asked, explored) = asyncio.run(
        session(
            {"FATHOM_LOCAL_CHAT_URL": llm.base_url, "FATHOM_LOCAL_CHAT_MODEL": MODEL},
            [
                ("ask", {"question": "how are passwords stored?", "project": "shop"}),
                ("explore", {"question": "how are passwords checked?", "project": "shop"}),
            ],
        )
    )
    assert {"ask", "explore"} <= names
    check_ask(asked, root)
    assert asked["provider"] == f"openai-compatible:{llm.base_url}:{MODEL}"
    check_explore(explored)
    assert llm.control.counters()["requests"] == {"chat": 5}

    names, _ = asyncio.run(session({}, []))  # no local LLM named: nothing may serve them
    assert "search_code" in names and not {"ask", "explore"} & names
