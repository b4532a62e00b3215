"""Acceptance (issue 7, #2 and #5): a canary key pushed through this server process to two real
sidecar processes, used by both against the OpenRouter emulator (its own process), is then
found nowhere: not in any file under the data dir, not in the server's or the sidecars' DEBUG
logs, not in any admin GET response, and not in any live object of this (the server) process.

The test process never holds the whole canary either: it keeps two halves, the key is joined
only inside a separate poster process, and every search matches "half one immediately followed
by half two" without ever building the joined string.

Each sidecar's own credential (its identity, kept in its state dir) gets the same search: read
from its file as two halves, it is found in no file of the server, no log, no admin response
and no live object of the server process, which keeps only its hash.
"""

from __future__ import annotations

import asyncio
import gc
import io
import json
import logging
import os
import subprocess
from pathlib import Path

import pytest

from fathom.devtools.emulator import EmulatorControl
from fathom.fleet.remote import KeyMissing
from fathom.roles import Role
from tests.fleet.canary_fixtures import POSTER, Canary
from tests.fleet.fleet_fixtures import (
    ADMIN,
    JOIN,
    PY,
    ProcessGroup,
    build_app,
    free_port,
    serve_in_loop,
    spawn_emulator,
    spawn_sidecar,
    wait_for,
)

pytestmark = pytest.mark.slow

HELLO = [{"role": "user", "content": "hello"}]


def live_objects_holding(canary: Canary) -> list[str]:
    """Every live container of this process (dicts, lists, tuples, sets, deques, frames, cells,
    slotted objects) that holds the canary as a str or bytes value."""
    gc.collect()
    found = []
    seen: set[int] = set()

    def holds(obj: object, depth: int = 0) -> bool:
        # CPython stops tracking dicts and tuples that hold only atoms (str, bytes, ints), so
        # `gc.get_objects()` alone misses `{"key": "sk-or-..."}`; follow referents into them.
        for ref in gc.get_referents(obj):
            if canary.in_value(ref):
                return True
            if (
                depth < 8
                and isinstance(ref, (dict, tuple, list, set, frozenset))
                and not gc.is_tracked(ref)
                and id(ref) not in seen
            ):
                seen.add(id(ref))
                if holds(ref, depth + 1):
                    return True
        return False

    for obj in gc.get_objects():
        try:
            if holds(obj):
                found.append(f"{type(obj).__name__} {repr(obj)[:120]!s}".replace(canary.h1, "<h1>"))
        except Exception:  # noqa: BLE001 - exotic objects whose repr fails
            found.append(type(obj).__name__)
    return found


async def test_canary_key_used_by_two_sidecars_then_found_nowhere(tmp_path: Path):
    canary = Canary()
    data_dir = tmp_path / "data"
    group = ProcessGroup(tmp_path / "logs")
    capture = io.StringIO()
    handler = logging.StreamHandler(capture)
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    # Every logger that could carry a frame or the key logs at DEBUG into the capture, whatever
    # an earlier server in this process (uvicorn's default config) set them to.
    noisy = {
        name: (
            logging.getLogger(name).level,
            logging.getLogger(name).disabled,
            logging.getLogger(name).propagate,
        )
        for name in ("uvicorn", "uvicorn.error", "websockets", "fathom", "httpx", "httpcore")
    }
    for name in noisy:
        lg = logging.getLogger(name)
        lg.setLevel(logging.DEBUG)
        lg.disabled = False
        lg.propagate = True
    emu_port = free_port()
    try:
        spawn_emulator(group, emu_port)
        emulator = EmulatorControl(f"http://127.0.0.1:{emu_port}")
        app, hub, registry = build_app(data_dir)
        async with serve_in_loop(app, log_level="debug") as url:
            port = int(url.rsplit(":", 1)[1])
            for name in ("sc-1", "sc-2"):
                hub.auth.approve(name)
                spawn_sidecar(
                    group,
                    name,
                    port,
                    [],
                    log_level="DEBUG",
                    extra=["--openrouter-url", f"http://127.0.0.1:{emu_port}/api/v1"],
                )
            cloud = {n: f"sidecar:{n}:{Role.CODE_ASSISTANT}:cloud:auto" for n in ("sc-1", "sc-2")}
            await wait_for(
                lambda: all(pid in registry for pid in cloud.values()), timeout=60, what="sidecars"
            )
            await wait_for(
                lambda: registry.health(cloud["sc-2"]).reason == "key missing on sc-2", what="key state"
            )

            # The push comes from another process: this one never sees the joined key.
            poster = await asyncio.to_thread(
                subprocess.run,
                [PY, "-c", POSTER, url, ADMIN],
                capture_output=True,
                text=True,
                timeout=120,
                env={"K1": canary.h1, "K2": canary.h2, "PATH": "/usr/bin:/bin"},
            )
            status, _, response = poster.stdout.partition("\n")
            assert status == "200", poster.stdout + poster.stderr
            outcome = json.loads(response)
            assert outcome["acked"] == ["sc-1", "sc-2"] and outcome["pushed"]
            assert not canary.in_text(poster.stdout)

            # Both sidecars use it: one chat each, and the emulator saw exactly that key.
            for pid in cloud.values():
                assert (await registry.get(pid).chat(HELLO)).content
            counters = emulator.counters()
            assert counters["key_hashes"] == [canary.sha256()]
            assert counters["requests"].get("chat") == 2

            # A keyless push (a model change) keeps the key working on both.
            keyless = await hub.push_config({Role.CODE_ASSISTANT: {"model": "other/coder"}})
            assert keyless.acked == ["sc-1", "sc-2"] and not keyless.key_sent
            for pid in cloud.values():
                assert (await registry.get(pid).chat(HELLO)).content
            assert emulator.counters()["by_model"].get("other/coder") == 2

            # Admin GET responses.
            import httpx

            async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}) as admin:
                for path in ("/admin/fleet", "/admin/overview", "/healthz", "/metrics", "/openapi.json"):
                    r = await admin.get(path)
                    for secret in (
                        canary,
                        *[
                            Canary.from_file(group.folder / f"sidecar-state-{n}" / "credential")
                            for n in ("sc-1", "sc-2")
                        ],
                    ):
                        assert not secret.in_text(r.text), path
                        assert not secret.in_bytes(r.content), path

            # The server's live objects, after the handler returned: neither the key nor either
            # sidecar's credential (the hub keeps a hash of it).
            credentials = [
                Canary.from_file(group.folder / f"sidecar-state-{n}" / "credential") for n in ("sc-1", "sc-2")
            ]
            for secret in (canary, *credentials):
                holders = live_objects_holding(secret)
                assert holders == [], holders

            # Files under the data dir (fleet.json holds the credentials' hashes only).
            for path in data_dir.rglob("*"):
                if path.is_file():
                    for secret in (canary, *credentials):
                        assert not secret.in_bytes(path.read_bytes()), path

            # A restarted sidecar has no key and says so; the other keeps working.
            group.kill(group.procs[1])  # sc-1, SIGKILL
            await wait_for(lambda: "sc-1" not in hub.connected(), what="sc-1 gone")
            spawn_sidecar(
                group,
                "sc-1",
                port,
                [],
                log_level="DEBUG",
                extra=["--openrouter-url", f"http://127.0.0.1:{emu_port}/api/v1"],
            )
            await wait_for(lambda: cloud["sc-1"] in registry, timeout=60, what="sc-1 back")
            await wait_for(lambda: "key missing on sc-1" in hub.problems(), what="key missing reported")
            with pytest.raises(KeyMissing, match="key missing on sc-1"):
                await registry.get(cloud["sc-1"]).chat(HELLO)
            assert (await registry.get(cloud["sc-2"]).chat(HELLO)).content
        emulator.close()
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        for name, (level, disabled, propagate) in noisy.items():
            lg = logging.getLogger(name)
            lg.setLevel(level)
            lg.disabled = disabled
            lg.propagate = propagate
        group.stop()

    # The DEBUG logs of the server (this process) and of both sidecars (all three runs).
    server_log = capture.getvalue()
    assert "config push (with key)" in server_log  # the capture did see the push
    assert "frame (content not logged)" in server_log  # and DEBUG frame dumps, elided
    assert not canary.in_text(server_log)
    assert JOIN not in server_log and ADMIN not in server_log
    for credential in credentials:
        assert not credential.in_text(server_log)
    for proc in group.procs:
        text = proc.output()
        assert not canary.in_text(text), proc.name
        assert JOIN not in text, proc.name
        for credential in credentials:
            assert not credential.in_text(text), proc.name
    sidecar_logs = [p.output() for p in group.procs if p.name.startswith("sidecar")]
    assert any("key held" in t for t in sidecar_logs)  # their DEBUG logs did cover the push


async def test_canary_key_is_in_no_token_route_no_audit_entry_and_no_mcp_answer(tmp_path: Path):
    """The operator's newer surface, after a canary key went through the server to a sidecar:
    MCP tokens created, listed and revoked (API and CLI), an MCP session on a token, the audit
    log (API, `fathom audit-log`, and its file). The key is in none of them, nor in any file of
    the data dir, the server's log or its live objects; no token is in the audit log either."""
    import httpx
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    canary = Canary()
    data_dir = tmp_path / "data"
    group = ProcessGroup(tmp_path / "logs")
    capture = io.StringIO()
    handler = logging.StreamHandler(capture)
    handler.setLevel(logging.DEBUG)
    fathom_log = logging.getLogger("fathom")
    old_level = fathom_log.level
    fathom_log.addHandler(handler)
    fathom_log.setLevel(logging.DEBUG)
    emu_port = free_port()
    outputs: list[str] = []
    try:
        spawn_emulator(group, emu_port)
        app, hub, registry = build_app(data_dir)
        async with serve_in_loop(app) as url:
            port = int(url.rsplit(":", 1)[1])
            hub.auth.approve("sc-1")
            spawn_sidecar(
                group, "sc-1", port, [], extra=["--openrouter-url", f"http://127.0.0.1:{emu_port}/api/v1"]
            )
            await wait_for(lambda: "sc-1" in hub.connected(), timeout=60, what="the sidecar")
            poster = await asyncio.to_thread(
                subprocess.run,
                [PY, "-c", POSTER, url, ADMIN],
                capture_output=True,
                text=True,
                timeout=120,
                env={"K1": canary.h1, "K2": canary.h2, "PATH": "/usr/bin:/bin"},
            )
            assert poster.stdout.startswith("200"), poster.stdout + poster.stderr
            assert json.loads(poster.stdout.partition("\n")[2])["acked"] == ["sc-1"]

            async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}) as admin:
                created = (
                    await admin.post("/admin/tokens", json={"name": "dev", "projects": ["api"]})
                ).json()
                token = created["token"]
                await admin.post("/admin/tokens", json={"name": "gone"})
                await admin.post("/admin/tokens/gone/revoke")
                responses = [
                    created,
                    (await admin.get("/admin/tokens")).json(),
                    (await admin.get("/admin/audit")).json(),
                ]
                for path in ("/admin/tokens", "/admin/audit?limit=1000", "/admin/overview"):
                    responses.append((await admin.get(path)).text)
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
            async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
                listed = await client.call_tool("list_projects", {})
                refused = await client.call_tool("index_project", {"path": str(tmp_path)})
                responses += [listed.structured_content, refused.content[0].text]
            cli_env = {**os.environ, "FATHOM_SERVER": url, "FATHOM_ADMIN_TOKEN": ADMIN, "COLUMNS": "200"}
            for argv in (["audit-log", "--limit", "200"], ["tokens", "list"]):
                done = await asyncio.to_thread(
                    subprocess.run,
                    [PY, "-m", "fathom.cli", *argv],
                    capture_output=True,
                    text=True,
                    timeout=120,
                    env=cli_env,
                )
                assert done.returncode == 0, done.stdout + done.stderr
                outputs.append(done.stdout + done.stderr)
            assert "POST /admin/key" in outputs[0] and "created MCP token dev" in outputs[0]

            for answer in responses:
                text = answer if isinstance(answer, str) else json.dumps(answer)
                assert not canary.in_text(text)
            for text in outputs:
                assert not canary.in_text(text) and token not in text and ADMIN not in text
            holders = live_objects_holding(canary)
            assert holders == [], holders
            for path in data_dir.rglob("*"):
                if path.is_file():
                    assert not canary.in_bytes(path.read_bytes()), path
                    assert token.encode() not in path.read_bytes(), path
            audit = (data_dir / "audit.log").read_text()
            entries = [json.loads(line) for line in audit.splitlines()]
            assert {"who": "admin", "what": "POST /admin/key", "outcome": "ok"}.items() <= entries[0].items()
            assert any(e["who"] == "mcp:dev" and e["what"].startswith("MCP index_project(") for e in entries)
            assert ADMIN not in audit and JOIN not in audit
        emulator = EmulatorControl(f"http://127.0.0.1:{emu_port}")
        emulator.close()
    finally:
        fathom_log.removeHandler(handler)
        fathom_log.setLevel(old_level)
        group.stop()
    server_log = capture.getvalue()
    assert not canary.in_text(server_log) and token not in server_log and ADMIN not in server_log
    for proc in group.procs:
        assert not canary.in_text(proc.output()), proc.name
