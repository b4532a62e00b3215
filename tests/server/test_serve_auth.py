"""`fathom serve` asks every client for a token, on loopback too.

Real `fathom serve` processes: the first start in a data dir issues a token, prints it once with
a `claude mcp add` line that pastes whole (never wrapped, even in a narrow terminal), and keeps
only its hash; a request without it is 401, with it an MCP session opens. A restart serves the
same token without printing it; `--rotate-token` replaces it. `--no-auth` serves without a
token on loopback and says what that allows; beyond loopback it is refused before anything
listens.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.fleet.fleet_fixtures import PY, ProcessGroup, free_port, wait_until
from tests.server.mcp_fixtures import INIT, MCP_HEADERS

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
ISSUED = re.compile(r"MCP token \((?:rotated; )?shown once; only its hash is kept\): (fm_\S+)")
NO_AUTH_SAYS = "any local user of this machine can search and index with your read rights"


def clean_env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in ENV.items() if not k.startswith("FATHOM_")}, "FATHOM_WATCH": "0", **extra}


def start_serve(group: ProcessGroup, name: str, data: Path, port: int, *args: str) -> object:
    # A narrow terminal: the token and the client line must come out whole anyway.
    proc = group.spawn(
        name,
        [PY, "-m", "fathom.cli", "--data-dir", str(data), "serve", "--port", str(port), *args],
        env=clean_env(COLUMNS="40"),
    )
    wait_until(lambda: "fathom MCP (streamable HTTP) on" in proc.output(), f"{name} to start", procs=[proc])
    return proc


def initialize(port: int, token: str | None) -> httpx.Response:
    headers = {**MCP_HEADERS, **({"Authorization": f"Bearer {token}"} if token else {})}
    return httpx.post(f"http://127.0.0.1:{port}/mcp", json=INIT, headers=headers, timeout=30)


@pytest.mark.slow
def test_serve_issues_a_token_on_loopback_prints_it_once_and_asks_for_it(tmp_path: Path):
    group, data, port = ProcessGroup(tmp_path / "logs"), tmp_path / "data", free_port()
    try:
        first = start_serve(group, "first", data, port)
        out = first.output()
        token = ISSUED.search(out).group(1)
        client_line = [line for line in out.splitlines() if "claude mcp add" in line]
        assert client_line == [
            f"use it: claude mcp add --transport http fathom http://127.0.0.1:{port}/mcp "
            f'--header "Authorization: Bearer {token}"'
        ], out
        bare, wrong, right = (
            initialize(port, None),
            initialize(port, "fm_" + "x" * 43),
            initialize(port, token),
        )
        assert bare.status_code == 401 and "Fathom needs a token" in bare.json()["error"]["message"]
        assert wrong.status_code == 401
        assert right.status_code == 200 and "serverInfo" in right.text, right.text
        assert token not in (data / "serve_token.json").read_text()  # only its hash is kept
        group.stop()

        # A restart serves the same token and does not print it again.
        again = start_serve(group, "again", data, port)
        assert "fm_" not in again.output() and "--rotate-token" in again.output()
        assert initialize(port, None).status_code == 401 and initialize(port, token).status_code == 200
        group.stop()

        # A rotation prints a fresh one; the old one stops working.
        rotated = start_serve(group, "rotated", data, port, "--rotate-token")
        fresh = ISSUED.search(rotated.output()).group(1)
        assert fresh != token and "rotated; shown once" in rotated.output()
        assert initialize(port, token).status_code == 401 and initialize(port, fresh).status_code == 200
    finally:
        group.stop()


@pytest.mark.slow
def test_no_auth_on_loopback_serves_without_a_token_and_says_what_it_allows(tmp_path: Path):
    group, data, port = ProcessGroup(tmp_path / "logs"), tmp_path / "data", free_port()
    try:
        proc = start_serve(group, "open", data, port, "--no-auth")
        said = " ".join(proc.output().split())
        assert NO_AUTH_SAYS in said and "(no token asked for)" in said
        assert "claude mcp add" not in said and not ISSUED.search(said)
        r = initialize(port, None)
        assert r.status_code == 200 and "serverInfo" in r.text, r.text
        assert not (data / "serve_token.json").exists()
    finally:
        group.stop()


def test_no_auth_beyond_loopback_is_refused_before_anything_listens(tmp_path: Path):
    data, port = tmp_path / "data", free_port()
    for host in ("0.0.0.0", "192.0.2.10"):
        done = subprocess.run(
            [
                PY,
                "-m",
                "fathom.cli",
                "--data-dir",
                str(data),
                "serve",
                "--no-auth",
                "--host",
                host,
                "--port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=clean_env(),
        )
        said = " ".join(done.stderr.split())
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"refusing --no-auth on {host}" in said and "127.0.0.1" in said
        assert "Traceback" not in done.stderr and "fm_" not in done.stdout
    with socket.socket() as s:  # it never listened
        s.bind(("0.0.0.0", port))
    assert not (data / "serve_token.json").exists()
    # An operator's token that is empty, short or guessable is refused as well, never echoed.
    empty, short, weak = tmp_path / "empty", tmp_path / "short", tmp_path / "weak"
    empty.write_text("\n")
    short.write_text("fm_too-short\n")
    weak.write_text("fm_" + "ab" * 15 + "\n")
    for token_file, reason in (
        (empty, "is empty"),
        (short, "is too short (12 characters; at least 24)"),
        (weak, "is too easy to guess"),
    ):
        done = subprocess.run(
            [
                PY,
                "-m",
                "fathom.cli",
                "--data-dir",
                str(data),
                "serve",
                "--port",
                str(port),
                "--token-file",
                str(token_file),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=clean_env(),
        )
        assert done.returncode == 2 and reason in " ".join(done.stderr.split()), done.stderr
        assert "ababab" not in done.stdout + done.stderr
