"""Hostile clients against the real server on 127.0.0.1: half-sent requests are closed within
the header timeout, connections over the cap are refused at once, one address gets only its
share of the cap while another is still served, forwarded addresses are believed only from a
named proxy, wrong tokens wait longer each time and are audited, refusals reach the audit log at
a bounded rate, the log rotates and is read from its tail, secrets in a query string never reach
it, tokens in a query string or a header (JWTs included) never reach the server's log, MCP
sessions answer only the token that opened them, an empty project list and a weak operator
token (short, repeated, sequential, a keyboard walk, few characters or a phrase) are refused,
and the admin routes check the token themselves when mounted without the request guard.

Real uvicorn (with the server's own connection bounds, `server.connections`), real `fathom
server` processes where a setting or the whole log is the point, real HTTP and raw sockets
(from 127.0.0.2 and 127.0.0.3 too: any 127.x.y.z is this machine). Timing logic runs on
injected clocks; the header-timeout tests wait on the real one, bounded (a 1 s timeout, 50
connections, a few seconds in all), and the per-peer test opens 30 sockets, waiting at most 15 s
for their refusals.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
import select
import socket
import stat
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from fathom.server.admin import AdminAuth, admin_router
from fathom.server.audit import AuditLog, RefusalRate
from fathom.server.connections import ConnectionLimits, peer_of, trusted, uvicorn_config
from fathom.server.guard import RequestGuard, WrongTokenDelay
from tests.fleet.fleet_fixtures import ADMIN, JOIN, PY, ProcessGroup, free_port, wait_http, wait_until
from tests.server.admin_fixtures import AUTH, Operator, build_operator_app
from tests.server.mcp_fixtures import INIT, MCP_HEADERS

SCRAPE = "fs_test-scrape-Hn4vQ0tR8yWk2LpZ6xCm1BfJ"  # a chosen token is random (`server.token_strength`)


class StepClock:
    """An injected clock whose time moves only when the test says, and whose sleeps are
    recorded and return at once."""

    def __init__(self) -> None:
        self.t = 1000.0
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


@contextlib.asynccontextmanager
async def serve(
    app: Any, *, limits: ConnectionLimits | None = None, forwarded: str | None = None
) -> AsyncIterator[str]:
    """`app` under uvicorn as `fathom server` configures it, on a free 127.0.0.1 port."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn_config(
        app,
        host="127.0.0.1",
        port=0,
        limits=limits,
        forwarded_allow_ips=forwarded,
        log_level="warning",
        lifespan="on",
        ws="websockets-sansio",
        log_config=None,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    for _ in range(500):
        if server.started or task.done():
            break
        await asyncio.sleep(0.01)
    assert server.started, "the server did not start"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
            await asyncio.wait_for(task, 10)
        sock.close()


async def half_sent(url: str, head: bytes) -> tuple[float, bytes]:
    """Send `head` (not a whole request head), then wait for the server to close; returns the
    seconds it took and what the server answered."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    started = time.monotonic()
    writer.write(head)
    await writer.drain()
    got = bytearray()
    async with asyncio.timeout(15):  # bounded: a server that never closes fails the test here
        while data := await reader.read(4096):
            got.extend(data)
    writer.close()
    return time.monotonic() - started, bytes(got)


def audit_entries(data_dir: Path) -> list[dict[str, Any]]:
    path = data_dir / "audit.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# ---------------------------------------------------------------------------- connections


async def test_fifty_half_sent_requests_are_closed_within_the_header_timeout(tmp_path: Path):
    app = build_operator_app(tmp_path / "data")
    async with serve(app, limits=ConnectionLimits(header_timeout_s=1.0)) as url:
        heads = [b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " for _ in range(49)] + [b""]
        results = await asyncio.gather(*(half_sent(url, h) for h in heads))
        waits = [r[0] for r in results]
        print(f"closed after {min(waits):.2f}-{max(waits):.2f} s")
        assert all(0.8 <= w < 4.0 for w in waits), waits
        assert all(r[1].startswith(b"HTTP/1.1 408") for r in results), results[0][1][:200]
        # A client trickling its head a byte at a time does not extend the deadline.
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        started = time.monotonic()
        got = bytearray()

        async def read_all() -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await reader.read(4096):
                    got.extend(data)

        reading = asyncio.create_task(read_all())
        async with asyncio.timeout(10):
            for byte in b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 90:
                if reading.done():
                    break
                with contextlib.suppress(ConnectionError, OSError):
                    writer.write(bytes([byte]))
                await asyncio.sleep(0.1)
            await reading
        closed_after = time.monotonic() - started
        writer.close()
        assert got.startswith(b"HTTP/1.1 408") and closed_after < 4.0, (bytes(got[:100]), closed_after)
        # Whole requests are served, and a kept-alive connection's next head is held to it too.
        async with httpx.AsyncClient(base_url=url) as client:
            assert (await client.get("/health")).status_code == 200
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /health HTTP/1.1\r\nHost: x")
        async with asyncio.timeout(10):
            got = bytearray()
            while data := await reader.read(4096):
                got.extend(data)
        writer.close()
        assert got.startswith(b"HTTP/1.1 200") and b"HTTP/1.1 408" in got, bytes(got[:300])


async def test_connections_over_the_cap_are_refused_at_once(tmp_path: Path):
    app = build_operator_app(tmp_path / "data")
    async with serve(app, limits=ConnectionLimits(header_timeout_s=30.0, max_connections=5)) as url:
        host, port = url.removeprefix("http://").split(":")
        held = [await asyncio.open_connection(host, int(port)) for _ in range(5)]
        await asyncio.sleep(0.2)
        reader, writer = await asyncio.open_connection(host, int(port))
        async with asyncio.timeout(5):
            answer = await reader.read()
        writer.close()
        assert answer.startswith(b"HTTP/1.1 503") and b"too many connections" in answer, answer[:200]
        for _, w in held:
            w.close()
        await asyncio.sleep(0.3)
        async with httpx.AsyncClient(base_url=url) as client:  # room again once they are gone
            assert (await client.get("/health")).status_code == 200


def idle_socket(source: str, port: int) -> socket.socket:
    """A connection to the server from `source` (any 127.x.y.z is this machine) that sends nothing."""
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    return sock


def health_from(source: str, url: str) -> int:
    with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=10) as client:
        return client.get(f"{url}/health").status_code


def test_one_peer_cannot_fill_the_connection_cap(tmp_path: Path):
    """The attack: one address opens more idle sockets than the whole cap. Only its share is
    taken in; the rest are refused at once, and another address is still served."""
    group = ProcessGroup(tmp_path / "logs")
    port, url = (port := free_port()), f"http://127.0.0.1:{port}"
    server = group.spawn(
        "server",
        [PY, "-m", "fathom.server", "--port", str(port), "--data-dir", str(tmp_path / "data"), "--no-watch"],
        env={
            "FATHOM_ADMIN_TOKEN": ADMIN,
            "FATHOM_JOIN_TOKEN": JOIN,
            "FATHOM_MAX_CONNECTIONS": "20",
            "FATHOM_MAX_CONNECTIONS_PER_PEER": "8",
            "FATHOM_HEADER_TIMEOUT_S": "120",
        },
    )
    sockets: list[socket.socket] = []
    try:
        # Ready, asked from a third address: nothing of 127.0.0.1's is open before the attack.
        wait_until(
            lambda: server.popen.poll() is None and _status(lambda: health_from("127.0.0.3", url)) == 200,
            "the server",
            procs=[server],
        )
        sockets = [idle_socket("127.0.0.1", port) for _ in range(30)]  # more than the total cap of 20
        answered: dict[socket.socket, bytes] = {}
        deadline = time.monotonic() + 15  # bounded: a refusal is written as the socket is accepted
        while len(answered) < 22 and time.monotonic() < deadline:
            ready, _, _ = select.select([s for s in sockets if s not in answered], [], [], 0.5)
            answered.update((s, s.recv(4096)) for s in ready)
        assert len(answered) == 22, f"{len(answered)} of 30 refused: {set(answered.values())}"
        assert all(
            a.startswith(b"HTTP/1.1 503") and b"this address holds too many" in a for a in answered.values()
        )
        # Another address is served; the eight taken in are live connections, served too.
        assert health_from("127.0.0.2", url) == 200
        held = [s for s in sockets if s not in answered]
        held[0].sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert held[0].recv(4096).startswith(b"HTTP/1.1 200")
        assert health_from("127.0.0.1", url) == 503  # the peer is still at its share
        for s in held:
            s.close()
        wait_until(lambda: health_from("127.0.0.1", url) == 200, "room for 127.0.0.1 again", timeout=30)
    finally:
        for s in sockets:
            s.close()
        group.stop()
    # One warning names the setting, not one per refused socket.
    warnings = [
        line for line in server.output().splitlines() if "refusing connections from 127.0.0.1" in line
    ]
    assert len(warnings) == 1 and "FATHOM_MAX_CONNECTIONS_PER_PEER" in warnings[0], warnings


def _status(call: Any) -> int:
    try:
        return call()
    except httpx.HTTPError:
        return 0


def test_a_peer_is_its_address_an_ipv6_host_its_64():
    assert peer_of("127.0.0.2") == "127.0.0.2" and peer_of("::1") == "::1"
    assert peer_of("2001:db8:1:2::5") == peer_of("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert peer_of("::ffff:203.0.113.9") == "203.0.113.9" and peer_of(None) is None
    assert (
        trusted("10.0.0.7", ["10.0.0.0/24"])
        and trusted("127.0.0.1", ["*"])
        and not trusted("10.0.1.7", ["10.0.0.7"])
    )


@pytest.mark.parametrize("forwarded, expected", [(None, "127.0.0.1"), ("127.0.0.1", "203.0.113.9")])
async def test_a_forwarded_address_is_believed_only_from_a_named_proxy(
    tmp_path: Path, forwarded: str | None, expected: str
):
    app = build_operator_app(tmp_path / "data")
    async with serve(app, forwarded=forwarded) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            r = await client.get(
                "/admin/fleet",
                headers={
                    "Authorization": "Bearer fa_wrong-token-0000000000000",
                    "X-Forwarded-For": "203.0.113.9",
                },
            )
            assert r.status_code == 401
    [entry] = [e for e in audit_entries(tmp_path / "data") if e["who"] == "unknown token"]
    assert entry["what"].endswith(f"from {expected}"), entry


# ---------------------------------------------------------------------------- wrong tokens


async def test_wrong_tokens_wait_longer_each_time_and_are_audited(tmp_path: Path):
    clock = StepClock()
    data = tmp_path / "data"
    app = build_operator_app(data)
    guard = next(m for m in app.user_middleware if m.cls is RequestGuard)
    guard.kwargs["wrong_tokens"] = WrongTokenDelay(clock=clock)
    async with serve(app) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            wrong = {"Authorization": "Bearer fa_guessed-token-000000000000000"}
            for _ in range(8):
                assert (await client.get("/admin/fleet", headers=wrong)).status_code == 401
            assert clock.slept == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]  # doubling, capped
            # A right token is never delayed, and does not reset the count.
            assert (await client.get("/admin/fleet", headers=AUTH)).status_code == 200
            assert (await client.post("/mcp", json=INIT, headers={**MCP_HEADERS, **wrong})).status_code == 401
            assert clock.slept[-1] == 5.0 and len(clock.slept) == 9
            # A peer that stopped guessing for a while starts again from the bottom.
            clock.t += 301
            assert (await client.get("/admin/fleet", headers=wrong)).status_code == 401
            assert clock.slept[-1] == 0.1
            # No token at all is no guess: answered at once.
            assert (await client.get("/admin/fleet")).status_code == 401
            assert len(clock.slept) == 10
    entries = [e for e in audit_entries(data) if e["who"] == "unknown token"]
    assert len(entries) == 10, entries
    assert entries[0]["what"] == "GET /admin/fleet from 127.0.0.1"
    assert entries[0]["outcome"].startswith("refused 401") and "0.1 s" in entries[0]["outcome"]
    assert "guessed" not in json.dumps(entries)  # never the token


# ---------------------------------------------------------------------------- the audit log


async def test_refusals_are_audited_at_a_bounded_rate_with_a_summary(tmp_path: Path):
    clock = StepClock()
    data = tmp_path / "data"
    app = build_operator_app(data)
    app.state.audit.rate.clock = clock
    async with serve(app) as url:
        async with httpx.AsyncClient(base_url=url, headers=AUTH) as admin:
            created = await admin.post("/admin/tokens", json={"name": "reader", "projects": ["demo"]})
            reader = {"Authorization": f"Bearer {created.json()['token']}"}
            async with httpx.AsyncClient(base_url=url, headers=reader) as client:
                for i in range(200):
                    r = await client.get(f"/admin/fleet?n={i}" if i % 2 else "/admin/overview")
                    assert r.status_code == 403
            refused = [e for e in audit_entries(data) if e["who"] == "mcp:reader"]
            assert len(refused) == 20, len(refused)  # the burst, then counted
            clock.t += 10  # the bucket refills: the count is written once, when the log is next read
            entries = (await admin.get("/admin/audit", params={"limit": 5})).json()["entries"]
            assert entries[-1]["who"] == "mcp:reader" and entries[-1]["what"].startswith(
                "180 more refused requests"
            )
            assert entries[-1]["outcome"] == "refused 403"
            # Once refilled, refusals are written one by one again.
            async with httpx.AsyncClient(base_url=url, headers=reader) as client:
                assert (await client.get("/admin/fleet")).status_code == 403
            assert len([e for e in audit_entries(data) if e["who"] == "mcp:reader"]) == 22


async def test_the_audit_log_rotates_and_is_read_from_its_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    import fathom.server.audit as audit_module

    data = tmp_path / "data"
    app = build_operator_app(data)
    app.state.audit.max_bytes = 4096
    async with serve(app) as url:
        async with httpx.AsyncClient(base_url=url, headers=AUTH) as admin:
            for i in range(150):
                assert (await admin.put("/admin/budget", json={"override": 1 + i % 8})).status_code == 200
            files = sorted(p.name for p in data.iterdir() if p.name.startswith("audit.log"))
            assert files == ["audit.log", "audit.log.1", "audit.log.2", "audit.log.3"], files
            for name in files:
                info = (data / name).stat()
                assert info.st_size <= 4096 and stat.S_IMODE(info.st_mode) == 0o600, (name, info)
            # The latest entries, in order, across generations.
            entries = (await admin.get("/admin/audit", params={"limit": 60})).json()["entries"]
            assert len(entries) == 60 and all(e["what"].startswith("PUT /admin/budget") for e in entries)
            # A big log is read from its end: the bytes read stay small whatever its size.
            big = "".join(
                json.dumps({"at": None, "who": "admin", "what": f"PUT /x/{i}", "outcome": "ok"}) + "\n"
                for i in range(200_000)
            )
            (data / "audit.log").write_text(big)
            read = [0]
            real_open = open

            def counting_open(*args: Any, **kwargs: Any) -> Any:
                fh = real_open(*args, **kwargs)
                real_read = fh.read

                def counted(*a: Any) -> Any:
                    out = real_read(*a)
                    read[0] += len(out)
                    return out

                fh.read = counted
                return fh

            monkeypatch.setattr(audit_module, "open", counting_open, raising=False)
            monkeypatch.setattr(Path, "read_bytes", lambda self: counting_open(self, "rb").read())
            entries = (await admin.get("/admin/audit", params={"limit": 20})).json()["entries"]
            assert [e["what"] for e in entries] == [f"PUT /x/{i}" for i in range(199_980, 200_000)]
            assert len(big) > 10_000_000 and read[0] < 256 * 1024, read[0]


async def test_secrets_in_a_query_string_never_reach_the_audit_log(operator: Operator):
    key = "sk-or-v1-" + "0123456789abcdef" * 4
    plain = "Zq8" + "x7Kp2Lm9" * 5  # a secret of no known shape, under a secret-sounding name
    async with operator.client() as admin:
        for query in (f"key={key}", f"api_key={plain}", f"q={key}", f"access_token={plain}&rebind=1"):
            r = await admin.post(f"/admin/fleet/tokens?{query}")
            assert r.status_code == 200, r.text
        entries = (await admin.get("/admin/audit")).json()["entries"]
    text = (operator.data_dir / "audit.log").read_text()
    assert key not in text and "0123456789abcdef" not in text and plain not in text and "x7Kp2Lm9" not in text
    whats = [e["what"] for e in entries if e["what"].startswith("POST /admin/fleet/tokens")]
    assert whats == [
        "POST /admin/fleet/tokens?key=***",
        "POST /admin/fleet/tokens?api_key=***",
        "POST /admin/fleet/tokens?q=sk-or-***",
        "POST /admin/fleet/tokens?access_token=***&rebind=1",
    ]


def jwt(subject: str) -> str:
    """A JWT's shape: base64url JSON header and claims, then a signature."""

    def part(value: object) -> str:
        text = value if isinstance(value, str) else json.dumps(value)
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    return ".".join(
        (
            part({"alg": "RS256", "kid": "k1"}),
            part({"sub": subject, "aud": "fathom"}),
            part(f"signature of {subject}"),
        )
    )


def test_tokens_in_a_query_string_or_a_header_never_reach_the_server_log(tmp_path: Path):
    """uvicorn's access log writes each request's path with its query string, and at DEBUG the
    WebSocket handshake's headers: a client's token there is scrubbed, whatever the name it
    travels under, from the log lines and the audit log alike."""
    group = ProcessGroup(tmp_path / "logs")
    port, data = free_port(), tmp_path / "data"
    url = f"http://127.0.0.1:{port}"
    server = group.spawn(
        "server",
        [
            PY,
            "-m",
            "fathom.server",
            "--port",
            str(port),
            "--data-dir",
            str(data),
            "--log-level",
            "DEBUG",
            "--no-watch",
        ],
        env={"FATHOM_ADMIN_TOKEN": ADMIN, "FATHOM_JOIN_TOKEN": JOIN},
    )
    plain = {
        n: f"Zq8x7Kp2Lm9-{n}-W4tR"
        for n in ("code", "state", "key", "client", "pw", "sig", "token", "api", "cookie")
    }
    tokens = {n: jwt(f"{n}-person") for n in ("access", "refresh", "id", "free", "proto")}
    admin = {"Authorization": f"Bearer {ADMIN}"}
    try:
        wait_http(f"{url}/health", proc=server)
        with httpx.Client(base_url=url, timeout=30) as http:
            assert http.get(f"/mcp?access_token={tokens['access']}").status_code == 401
            assert http.get(f"/health?code={plain['code']}&state={plain['state']}").status_code == 200
            r = http.get(
                f"/admin/overview?api_key={plain['key']}&client_secret={plain['client']}&password={plain['pw']}"
                f"&sig={plain['sig']}&refresh_token={tokens['refresh']}&id_token={tokens['id']}",
                headers=admin,
            )
            assert r.status_code == 200
            assert (
                http.get(f"/health?q={tokens['free']}").status_code == 200
            )  # under a name that says nothing
            assert http.post(f"/admin/fleet/tokens?token={plain['token']}", headers=admin).status_code == 200
        # A WebSocket handshake, its headers dumped at DEBUG: a browser passes its token in
        # Sec-WebSocket-Protocol; others in a key header or a cookie.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(
                (
                    "GET /sidecar HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                    "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                    f"Sec-WebSocket-Protocol: {tokens['proto']}\r\nX-Api-Key: {plain['api']}\r\n"
                    f"Cookie: session={plain['cookie']}\r\n\r\n"
                ).encode()
            )
            assert sock.recv(4096).startswith(b"HTTP/1.1 ")  # answered: the head was read and dumped
    finally:
        group.stop()
    log, audit = server.output(), (data / "audit.log").read_text()
    # The lines were written, each with its secret replaced.
    assert (
        'GET /mcp?access_token=*** HTTP/1.1" 401' in log and "GET /health?code=***&state=*** HTTP/1.1" in log
    )
    assert "api_key=***&client_secret=***&password=***&sig=***&refresh_token=***&id_token=***" in log
    assert "GET /health?q=eyJ*** HTTP/1.1" in log
    assert "< sec-websocket-protocol: ***" in log and "< x-api-key: ***" in log and "< cookie: ***" in log
    assert "POST /admin/fleet/tokens?token=***" in audit
    for text in (log, audit):
        for secret in (*plain.values(), *tokens.values(), ADMIN, JOIN):
            assert secret not in text
        assert "Zq8x7Kp2Lm9" not in text and not re.search(r"eyJ[\w-]{4,}", text)


# ---------------------------------------------------------------------------- tokens and sessions


async def test_an_mcp_session_answers_only_the_token_that_opened_it(operator: Operator):
    async with operator.client() as admin:
        created = await admin.post("/admin/tokens", json={"name": "reader", "projects": ["demo"]})
        reader = created.json()["token"]
    async with httpx.AsyncClient(base_url=operator.url, headers=MCP_HEADERS, timeout=30) as http:
        opened = await http.post("/mcp", json=INIT, headers=AUTH)
        assert opened.status_code == 200, opened.text
        session = opened.headers["mcp-session-id"]
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        as_reader = {
            "Authorization": f"Bearer {reader}",
            "mcp-session-id": session,
            "mcp-protocol-version": "2025-06-18",
        }
        assert (await http.delete("/mcp", headers=as_reader)).status_code == 404
        r = await http.post("/mcp", json=ping, headers=as_reader)
        assert r.status_code == 404 and "Session not found" in r.text, r.text
        # The admin's session is untouched and still answers its own token.
        r = await http.post(
            "/mcp",
            json=ping,
            headers={**AUTH, "mcp-session-id": session, "mcp-protocol-version": "2025-06-18"},
        )
        assert r.status_code == 200, r.text
        # And a session the reader opened answers the reader, not the admin.
        mine = await http.post("/mcp", json=INIT, headers={"Authorization": f"Bearer {reader}"})
        assert mine.status_code == 200
        r = await http.delete(
            "/mcp",
            headers={
                **AUTH,
                "mcp-session-id": mine.headers["mcp-session-id"],
                "mcp-protocol-version": "2025-06-18",
            },
        )
        assert r.status_code == 404


async def test_an_empty_project_list_is_refused_not_read_as_every_project(operator: Operator):
    async with operator.client() as admin:
        r = await admin.post("/admin/tokens", json={"name": "nobody", "projects": []})
        assert r.status_code == 400 and "project list is empty" in r.text, r.text
        assert (await admin.get("/admin/tokens")).json()["tokens"] == []
        # Leaving the list out is the explicit "every project".
        r = await admin.post("/admin/tokens", json={"name": "everyone"})
        assert r.status_code == 201 and r.json()["projects"] is None
    # The CLI sends no empty list: an empty --project is refused by name.
    from typer.testing import CliRunner

    from fathom.cli import app as cli

    done = await asyncio.to_thread(
        CliRunner().invoke,
        cli,
        ["tokens", "create", "--name", "blank", "--project", ""],
        env={"FATHOM_SERVER": operator.url, "FATHOM_ADMIN_TOKEN": ADMIN},
    )
    assert done.exit_code != 0 and "invalid project name" in done.output, done.output


# What an operator might choose, and what the refusal says: the attack's repeated letter, a
# sequence, a phrase, a keyboard walk, four letters over and over, and a short one.
WEAK_TOKENS = [
    ("FATHOM_ADMIN_TOKEN", "aaaaaaaaaaaaaaaaaaaaaaaa", "is too easy to guess: about 2^8 tries"),
    ("FATHOM_ADMIN_TOKEN", "abcdef123456abcdef123456", "is too easy to guess: about 2^14 tries"),
    (
        "FATHOM_ADMIN_TOKEN",
        "correct-horse-battery-staple-7Kq2",
        "is too easy to guess: 76 % of it is dictionary words",
    ),
    ("FATHOM_METRICS_TOKEN", "qwertyuiopasdfghjklzxcvbnm", "is too easy to guess: about 2^19 tries"),
    (
        "FATHOM_JOIN_TOKEN",
        "acgtgtcagtacgtgcatgcatgcatcgtagc",
        "is too easy to guess: it uses only 4 different characters",
    ),
    ("FATHOM_JOIN_TOKEN", "short-join", "is too short (10 characters; at least 24)"),
]


def test_a_weak_operator_token_is_refused_at_start_and_a_strong_one_starts(tmp_path: Path):
    data, group = tmp_path / "data", ProcessGroup(tmp_path / "logs")
    strong = {"FATHOM_ADMIN_TOKEN": ADMIN, "FATHOM_JOIN_TOKEN": JOIN, "FATHOM_METRICS_TOKEN": SCRAPE}
    argv = [PY, "-m", "fathom.server", "--data-dir", str(data), "--port"]
    try:
        for n, (setting, weak, reason) in enumerate(WEAK_TOKENS):
            # The other tokens are strong: the weak one alone stops the start.
            port = free_port()
            proc = group.spawn(f"weak-{n}", [*argv, str(port)], env={**strong, setting: weak})
            # Bounded, and failing at once if it starts instead of refusing.
            wait_until(
                lambda: (
                    proc.popen.poll() is not None
                    or _status(lambda: httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code)
                    == 200
                ),
                "the start's end",
                timeout=120,
            )
            said = " ".join(proc.output().split())
            assert proc.popen.poll() == 2, (setting, weak, said)
            assert f"{setting} {reason}" in said and "secrets.token_urlsafe(32)" in said, said
            assert weak not in said and "Traceback" not in said  # never the token itself
            assert "admin token" not in said  # nothing was issued...
            assert not (data / "admin.json").exists() and not (data / "fleet.json").exists()  # ...nor written
        # Strong tokens start the server, and each opens what it is for.
        port = free_port()
        proc = group.spawn("strong", [*argv, str(port)], env=strong)
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/health", proc=proc)
        assert (
            httpx.get(f"{url}/admin/overview", headers={"Authorization": f"Bearer {ADMIN}"}).status_code
            == 200
        )
        assert httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {SCRAPE}"}).status_code == 200
    finally:
        group.stop()
    assert "admin token (shown once)" not in proc.output() and ADMIN not in proc.output()


# ---------------------------------------------------------------------------- both layers


async def test_the_admin_routes_check_the_token_without_the_request_guard(tmp_path: Path):
    from fastapi import FastAPI

    from fathom.fleet.hub import Hub
    from fathom.inference.registry import ProviderRegistry

    hub = Hub(tmp_path, registry=ProviderRegistry())
    bare = FastAPI()
    bare.include_router(admin_router(hub, AdminAuth(tmp_path, tokens=(ADMIN,))))
    async with serve(bare) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            assert (await client.get("/admin/fleet")).status_code == 401
            assert (
                await client.get("/admin/fleet", headers={"Authorization": "Bearer wrong"})
            ).status_code == 401
            assert (await client.post("/admin/fleet/tokens")).status_code == 401
            assert (await client.get("/admin/fleet", headers=AUTH)).status_code == 200
    await hub.aclose()


def test_refusal_rate_reports_what_it_counted_when_a_bucket_is_evicted():
    clock = StepClock()
    rate = RefusalRate(burst=1, per_second=0.0, max_keys=2, clock=clock)
    assert rate.admit("a", "refused 403") == (True, [])
    assert rate.admit("a", "refused 403") == (False, [])
    rate.admit("b", "refused 403")
    written, due = rate.admit("c", "refused 403")  # "a" goes, its count with it
    assert written and due == [("a", "refused 403", 1)]


def test_an_audit_log_keeps_three_generations(tmp_path: Path):
    log = AuditLog(tmp_path, max_bytes=300)
    for i in range(40):
        log.record("admin", f"action {i}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "audit.log",
        "audit.log.1",
        "audit.log.2",
        "audit.log.3",
    ]
    assert log.read(3)[-1]["what"] == "action 39"
