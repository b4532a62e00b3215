"""Starting a server safely: `fathom serve` with the operator's token refuses requests that lack
it, DNS-rebinding protection on (the token it issues itself, and `--no-auth`: test_serve_auth);
`fathom server` prints tokens only once its port is bound, and rotates them; the sidecar takes
its join token from the environment or a file, and warns when it is on the command line.

Real processes where the point is what a process prints and how it exits; the MCP app in
process where the point is what a request gets.
"""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path

import httpx
import pytest

from fathom.fleet.command import join_token
from fathom.fleet.command import main as sidecar_main
from fathom.server.mcp_http import standalone_app
from tests.fleet.fleet_fixtures import PY, ProcessGroup, free_port, spawn_sidecar, wait_http, wait_until
from tests.server.mcp_fixtures import INIT, MCP_HEADERS

TOKEN = "fm_serve-test-59v6C5Q4dflnf36eVTCaqeGfZkBwh88X"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in ENV.items() if not k.startswith("FATHOM_")}
    return {**env, **extra}


# ---------------------------------------------------------------------------- fathom serve


@pytest.mark.slow
def test_serve_with_a_token_refuses_requests_without_it(tmp_path: Path):
    group = ProcessGroup(tmp_path / "logs")
    port = free_port()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    try:
        proc = group.spawn(
            "serve",
            [
                PY,
                "-m",
                "fathom.cli",
                "--data-dir",
                str(tmp_path / "data"),
                "serve",
                "--host",
                "0.0.0.0",
                "--port",
                str(port),
                "--token-file",
                str(token_file),
            ],
            env=clean_env(),
        )
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/.well-known/oauth-protected-resource", proc=proc)
        with httpx.Client(base_url=url, headers=MCP_HEADERS, timeout=30) as http:
            bare = http.post("/mcp", json=INIT)
            wrong = http.post("/mcp", json=INIT, headers={"Authorization": "Bearer fm_wrong-token-000000000"})
            right = http.post("/mcp", json=INIT, headers={"Authorization": f"Bearer {TOKEN}"})
            # DNS-rebinding protection stays on: a foreign Host or Origin is refused, token or not.
            rebound = http.post(
                "/mcp",
                json=INIT,
                headers={"Authorization": f"Bearer {TOKEN}", "Host": f"attacker.example:{port}"},
            )
            origin = http.post(
                "/mcp",
                json=INIT,
                headers={"Authorization": f"Bearer {TOKEN}", "Origin": "http://attacker.example"},
            )
        assert bare.status_code == 401 and "Fathom needs a token" in bare.json()["error"]["message"]
        assert wrong.status_code == 401 and "was refused" in wrong.json()["error"]["message"]
        assert right.status_code == 200, right.text
        assert rebound.status_code == 421 and origin.status_code == 403
        assert TOKEN not in proc.output()
    finally:
        group.stop()


async def test_serve_on_loopback_needs_no_token_unless_one_is_set(tmp_path: Path):
    from fathom.config import Settings
    from fathom.server.mcp_tools import build_mcp_server
    from fathom.service import Fathom
    from tests.fleet.fleet_fixtures import HashEmbedder, serve_in_loop

    fathom = Fathom(Settings(data_dir=tmp_path), encoder=HashEmbedder(width=8))
    for token, expected in ((None, 200), (TOKEN, 401)):
        app = standalone_app(build_mcp_server(fathom), token=token, host="127.0.0.1")
        async with serve_in_loop(app) as url, httpx.AsyncClient(base_url=url, headers=MCP_HEADERS) as http:
            r = await http.post("/mcp", json=INIT)
            assert r.status_code == expected, (token, r.text)
            if token:
                assert (
                    await http.post("/mcp", json=INIT, headers={"Authorization": f"Bearer {token}"})
                ).status_code == 200
    await fathom.aclose()


# ---------------------------------------------------------------------------- fathom server


def start_server(
    group: ProcessGroup, name: str, data_dir: Path, port: int, *args: str, env: dict[str, str] | None = None
) -> object:
    return group.spawn(
        name,
        [PY, "-m", "fathom.server", "--port", str(port), "--data-dir", str(data_dir), *args],
        env=clean_env(**(env or {})),
    )


def printed_tokens(output: str) -> dict[str, str]:
    return {kind: tok for kind, tok in re.findall(r"(admin|sidecar join) token[^:]*: (f[aj]_\S+)", output)}


@pytest.mark.slow
def test_a_busy_port_prints_no_token_and_exits_cleanly(tmp_path: Path):
    group = ProcessGroup(tmp_path / "logs")
    data = tmp_path / "data"
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        proc = start_server(group, "busy", data, port)
        assert proc.popen.wait(timeout=120) == 1
        out = proc.output()
        print(out)
        assert f"cannot listen on 127.0.0.1:{port}" in out and "No token was issued" in out
        assert "shown once" not in out and not re.search(r"\bf[aj]_\w", out) and "Traceback" not in out
        # Nothing was kept either: the next start on a free port is a first start, with both tokens.
        for name in ("admin.json", "fleet.json"):
            assert not (data / name).exists() or "hash" not in (data / name).read_text()
        busy.close()
        proc = start_server(group, "first", data, port)
        wait_until(lambda: "fathom server on" in proc.output(), "the server to start", procs=[proc])
        tokens = printed_tokens(proc.output())
        assert set(tokens) == {"admin", "sidecar join"}, proc.output()
        wait_http(f"http://127.0.0.1:{port}/health", proc=proc)
        r = httpx.get(
            f"http://127.0.0.1:{port}/admin/overview",
            headers={"Authorization": f"Bearer {tokens['admin']}"},
            timeout=30,
        )
        assert r.status_code == 200
    finally:
        busy.close()
        group.stop()


@pytest.mark.slow
def test_rotation_prints_a_fresh_token_once_and_the_old_one_stops_working(tmp_path: Path):
    group = ProcessGroup(tmp_path / "logs")
    data = tmp_path / "data"
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def overview(token: str) -> int:
        return httpx.get(
            f"{url}/admin/overview", headers={"Authorization": f"Bearer {token}"}, timeout=30
        ).status_code

    def run(name: str, *args: str, env: dict[str, str] | None = None) -> tuple[object, dict[str, str]]:
        proc = start_server(group, name, data, port, *args, env=env)
        wait_until(lambda: "fathom server on" in proc.output(), f"{name} to start", procs=[proc])
        wait_http(f"{url}/health", proc=proc)
        return proc, printed_tokens(proc.output())

    def stop(proc: object) -> None:
        group.kill(proc, sig=15)

    try:
        first, old = run("first")
        assert overview(old["admin"]) == 200
        stop(first)
        # A restart prints nothing: the tokens were shown once.
        again, none = run("again")
        assert none == {} and overview(old["admin"]) == 200
        stop(again)

        rotated, new = run("rotated", "--rotate-admin-token", "--rotate-join-token")
        out = rotated.output()
        assert (
            "admin token (rotated; shown once)" in out and "sidecar join token (rotated; shown once)" in out
        )
        assert set(new) == {"admin", "sidecar join"} and new["admin"] != old["admin"]
        assert overview(old["admin"]) == 401 and overview(new["admin"]) == 200
        # The old join token is refused; the new one joins, read from a file.
        refused = spawn_sidecar(group, "gpu-old", port, [], token=old["sidecar join"])
        assert refused.popen.wait(timeout=120) == 2 and "refused" in refused.output()
        token_file = tmp_path / "join-token"
        token_file.write_text(new["sidecar join"] + "\n")
        joined = group.spawn(
            "sidecar-gpu-new",
            [
                PY,
                "-m",
                "fathom.fleet.command",
                "--server",
                f"ws://127.0.0.1:{port}",
                "--name",
                "gpu-new",
                "--token-file",
                str(token_file),
                "--state-dir",
                str(tmp_path / "state"),
            ],
            env=clean_env(),
        )

        def pending() -> bool:
            sidecars = httpx.get(
                f"{url}/admin/fleet", headers={"Authorization": f"Bearer {new['admin']}"}, timeout=30
            ).json()["sidecars"]
            return any(
                s["name"] == "gpu-new" and s["state"] == "pending" and s["connected"] for s in sidecars
            )

        wait_until(pending, "the sidecar with the new join token", procs=[joined])
        assert "visible to every user" not in joined.output()  # no warning: it was not on argv
        audit = httpx.get(
            f"{url}/admin/audit", headers={"Authorization": f"Bearer {new['admin']}"}, timeout=30
        ).json()
        rotations = [e for e in audit["entries"] if e["who"] == "server command line"]
        assert [e["what"].split(" (")[0] for e in rotations] == [
            "rotated the sidecar join token",
            "rotated the admin token",
        ]
        text = (data / "audit.log").read_text()
        for token in (*old.values(), *new.values()):
            assert token not in text and token not in (data / "admin.json").read_text()
        stop(rotated)

        # With FATHOM_ADMIN_TOKEN set, a rotation makes that one the only admin token.
        chosen = "fa_chosen-by-the-operator-9-9_4v6ypkkg6NnHyoHVG-JOgzw7eXKV"
        by_env, printed = run("by-env", "--rotate-admin-token", env={"FATHOM_ADMIN_TOKEN": chosen})
        assert printed == {} and "FATHOM_ADMIN_TOKEN is now the only admin token" in by_env.output()
        assert overview(new["admin"]) == 401 and overview(chosen) == 200
        assert chosen not in by_env.output()
    finally:
        group.stop()


# ---------------------------------------------------------------------------- the sidecar's token


def test_the_sidecar_takes_its_token_from_a_file_or_the_environment(tmp_path: Path, monkeypatch, capsys):
    file = tmp_path / "token"
    file.write_text("fj_from-a-file\n")
    monkeypatch.setenv("FATHOM_SIDECAR_TOKEN", "fj_from-the-environment")
    assert join_token(None, file) == "fj_from-a-file"
    assert join_token(None, None) == "fj_from-the-environment"
    assert capsys.readouterr().err == ""
    monkeypatch.delenv("FATHOM_SIDECAR_TOKEN")
    with pytest.raises(Exception, match="FATHOM_SIDECAR_TOKEN"):
        join_token(None, None)
    (tmp_path / "empty").write_text("")
    with pytest.raises(Exception, match="is empty"):
        join_token(None, tmp_path / "empty")
    # On the command line it still works, with a warning that `ps` shows it.
    assert (
        sidecar_main(
            [
                "--server",
                "ws://192.0.2.1:8765",
                "--token",
                "fj_on-argv",
                "--name",
                "n",
                "--serve",
                "embedding=in-process",
            ]
        )
        == 2
    )  # refused for the insecure URL, after the warning
    err = capsys.readouterr().err
    assert "visible to every user of this host" in err and "fj_on-argv" not in err
    assert sidecar_main(["--server", "wss://fathom.example.net", "--name", "n"]) == 2
    assert "a join token is required" in capsys.readouterr().err


def test_tokens_are_kept_as_hashes_only(tmp_path: Path):
    from fathom.server.admin import AdminAuth

    auth = AdminAuth(tmp_path)
    first = auth.issue()
    fresh = auth.replace()
    assert fresh and fresh != first and not auth.check(first) and auth.check(fresh)
    stored = json.loads((tmp_path / "admin.json").read_text())
    assert fresh not in json.dumps(stored) and len(stored["token_hashes"]) == 1
