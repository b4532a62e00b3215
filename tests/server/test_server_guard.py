"""Auth before bodies: the admin token is checked before a request body is read or parsed, and
every route has a body-size limit enforced while the body streams in.

Over real HTTP on 127.0.0.1, with raw sockets where the point is what the server does before
the body arrives: a refusal must come back while the client still holds (most of) its body.
The memory test runs a real server process and streams four unauthenticated 250 MB bodies at
it concurrently; the server's resident memory must not grow by 50 MB.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.fleet.fleet_fixtures import ProcessGroup, free_port, spawn_server
from tests.server.admin_fixtures import AUTH, Operator

MB = 1024 * 1024


async def raw_request(
    url: str,
    head: str,
    body_bytes: int = 0,
    *,
    chunk: int = 256 * 1024,
    timeout: float = 60.0,
    keep_sending: bool = False,
) -> tuple[int, bytes, int, int]:
    """Send `head`, then up to `body_bytes` of body (chunked if `head` says so), reading the
    reply at the same time; stop sending as soon as a reply arrives (or, with `keep_sending`,
    go on like a hostile client until the body is all sent or the server closes).
    Returns (status, reply bytes, body bytes sent before the reply, body bytes sent in all)."""
    chunked = "Transfer-Encoding: chunked" in head
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    sent = 0
    before_reply: int | None = None
    reply = bytearray()
    got_reply = asyncio.Event()

    async def read() -> None:
        while b"\r\n\r\n" not in reply:
            data = await reader.read(65536)
            if not data:
                break
            reply.extend(data)
        got_reply.set()

    reading = asyncio.create_task(read())
    payload = b"a" * chunk
    try:
        async with asyncio.timeout(timeout):
            writer.write(head.encode())
            await writer.drain()
            while sent < body_bytes and (keep_sending or not got_reply.is_set()):
                if got_reply.is_set() and before_reply is None:
                    before_reply = sent
                n = min(chunk, body_bytes - sent)
                data = payload[:n]
                writer.write(b"%x\r\n%s\r\n" % (n, data) if chunked else data)
                try:
                    await writer.drain()
                except (ConnectionError, OSError):
                    break
                sent += n
                await asyncio.sleep(0)
            if chunked and sent >= body_bytes and not got_reply.is_set():
                writer.write(b"0\r\n\r\n")
            await reading
    finally:
        reading.cancel()
        writer.close()
        await asyncio.gather(writer.wait_closed(), return_exceptions=True)
    status = int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/") else 0
    return status, bytes(reply), sent if before_reply is None else before_reply, sent


def head(
    method: str, path: str, *, length: int | None = None, chunked: bool = False, token: str | None = None
) -> str:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    elif length is not None:
        lines.append(f"Content-Length: {length}")
    return "\r\n".join(lines) + "\r\n\r\n"


async def test_malformed_json_without_a_token_gets_401(operator: Operator):
    async with operator.client(headers={}) as anon:
        for method, path in (
            ("POST", "/admin/jobs"),
            ("PUT", "/admin/policies"),
            ("POST", "/admin/key"),
            ("PUT", "/admin/budget"),
            ("POST", "/admin/gate/verify"),
            ("POST", "/mcp"),
        ):
            r = await anon.request(
                method, path, content=b"{not json", headers={"Content-Type": "application/json"}
            )
            assert r.status_code == 401, (path, r.status_code, r.text)
            # A bare RFC 6750 challenge (/mcp names its realm): no error code without a token.
            assert r.headers["www-authenticate"] in ("Bearer", 'Bearer realm="fathom"')
        r = await anon.post("/admin/jobs", content=b"{not json", headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401


async def test_an_unauthenticated_body_is_refused_before_it_is_sent(operator: Operator):
    status, reply, sent, _ = await raw_request(
        operator.url, head("POST", "/admin/jobs", length=250 * MB), 0, timeout=10
    )
    assert status == 401 and sent == 0, reply[:300]


async def test_every_route_has_a_body_limit_enforced_while_streaming(operator: Operator):
    from fathom.server.guard import DEFAULT_BODY_LIMIT

    # Declared too large: refused from the headers alone, before any byte of body.
    status, reply, sent, _ = await raw_request(
        operator.url, head("POST", "/admin/jobs", length=5 * MB, token=operator_token()), 0, timeout=10
    )
    assert status == 413 and sent == 0, reply[:300]
    assert b"limit" in reply
    # Chunked (no length): cut off once the route's limit is passed, not after reading it all.
    status, reply, sent, _ = await raw_request(
        operator.url, head("POST", "/admin/jobs", chunked=True, token=operator_token()), 64 * MB, timeout=30
    )
    assert status == 413 and sent < 8 * MB, (status, sent)
    # The server-wide default covers routes without a tighter limit (here /mcp).
    status, _, sent, _ = await raw_request(
        operator.url,
        head("POST", "/mcp", chunked=True, token=operator_token()),
        DEFAULT_BODY_LIMIT * 8,
        timeout=30,
    )
    assert status == 413 and sent < DEFAULT_BODY_LIMIT * 4, (status, sent)
    # A route's own limit is tighter than the default.
    async with operator.client() as admin:
        big = json.dumps({"override": 4, "pad": "x" * 20_000})
        r = await admin.put("/admin/budget", content=big, headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and "PUT /admin/budget" in r.json()["detail"]["message"], r.text
        # Requests within their limits still work, and the server goes on serving.
        assert (await admin.put("/admin/budget", json={"override": 4})).status_code == 200
        assert (await admin.get("/admin/overview")).status_code == 200


def operator_token() -> str:
    return AUTH["Authorization"].split(" ", 1)[1]


# ---------------------------------------------------------------------------- memory


def _rss_kb(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to read a process's memory")
async def test_four_concurrent_unauthenticated_250_mb_bodies_leave_the_server_memory_flat(tmp_path: Path):
    group = ProcessGroup(tmp_path / "logs")
    port = free_port()
    try:
        server = spawn_server(group, tmp_path / "data", port, log_level="WARNING", encoder_loaded=True)
        pid = server.popen.pid
        url = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=url) as c:  # warm the request path once
            assert c.post("/admin/jobs", content=b"{}").status_code == 401
        before = _rss_kb(pid)
        peak = [before]
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                try:
                    peak[0] = max(peak[0], _rss_kb(pid))
                except (OSError, AssertionError):
                    return
                time.sleep(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        size = 250 * MB
        started = time.monotonic()
        try:
            results = await asyncio.wait_for(
                asyncio.gather(
                    raw_request(
                        url, head("POST", "/admin/jobs", length=size), size, timeout=90, keep_sending=True
                    ),
                    raw_request(
                        url, head("POST", "/admin/jobs", length=size), size, timeout=90, keep_sending=True
                    ),
                    raw_request(
                        url, head("POST", "/admin/jobs", chunked=True), size, timeout=90, keep_sending=True
                    ),
                    raw_request(
                        url, head("PUT", "/admin/policies", chunked=True), size, timeout=90, keep_sending=True
                    ),
                ),
                120,
            )
        finally:
            await asyncio.sleep(0.5)
            stop.set()
            sampler.join(5)
        after = _rss_kb(pid)
        elapsed = time.monotonic() - started
        growth_mb = (max(peak[0], after) - before) / 1024
        print(
            f"server RSS before {before / 1024:.1f} MB, peak {peak[0] / 1024:.1f} MB, after {after / 1024:.1f} MB"
            f" (growth {growth_mb:.1f} MB) in {elapsed:.1f}s; body MB sent before each reply:"
            f" {[round(r[2] / MB, 1) for r in results]}, in all: {[round(r[3] / MB, 1) for r in results]}"
        )
        assert [r[0] for r in results] == [401, 401, 401, 401], [r[1][:200] for r in results]
        assert growth_mb < 50, growth_mb
        assert all(r[2] < 8 * MB for r in results), [r[2] for r in results]
        with httpx.Client(base_url=url) as c:
            assert c.get("/health").status_code == 200
    finally:
        group.stop()
