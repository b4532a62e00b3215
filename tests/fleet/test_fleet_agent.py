"""The sidecar agent's own rules: where it may connect, how it backs off, how it reads
`--serve`, how it merges pushed config around the key it holds, and its HTTP backends."""

from __future__ import annotations

import pytest
from fastapi import FastAPI

from fathom.errors import ConfigError
from fathom.fleet import protocol as p
from fathom.fleet.agent import Backoff, InsecureServerURL, Sidecar, error_info, server_url
from fathom.fleet.backends import BackendError, TEIBackend, open_backend, parse_serve
from fathom.fleet.command import main
from fathom.inference.openrouter import InFlightBudgetExhausted, RateLimited
from fathom.roles import Role
from tests.fleet.fleet_fixtures import HashEmbedder, serve_in_loop


def test_plain_ws_only_to_loopback():
    assert server_url("ws://127.0.0.1:8765") == "ws://127.0.0.1:8765/sidecar"
    assert server_url("http://localhost:1") == "ws://localhost:1/sidecar"
    assert server_url("ws://[::1]:9/sidecar") == "ws://[::1]:9/sidecar"
    assert server_url("https://fathom.example.com") == "wss://fathom.example.com/sidecar"
    for url in ("ws://10.0.0.5:8765", "http://fathom.example.com", "gpu-server:8765"):
        with pytest.raises(InsecureServerURL, match="wss://"):
            server_url(url)
    with pytest.raises(ConfigError):
        server_url("ftp://x")


def test_cli_refuses_insecure_server_before_loading_anything(capsys):
    assert (
        main(
            [
                "--server",
                "ws://192.0.2.1:8765",
                "--token",
                "t",
                "--name",
                "n",
                "--serve",
                "embedding=in-process",
            ]
        )
        == 2
    )
    assert "plain ws://" in capsys.readouterr().err


def test_backoff_is_jittered_exponential_and_capped():
    b = Backoff(initial=1.0, cap=8.0, rng=lambda: 1.0)
    assert [b.next() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    b = Backoff(initial=1.0, cap=8.0, rng=lambda: 0.0)
    assert [b.next() for _ in range(4)] == [0.5, 1.0, 2.0, 4.0]
    b.reset()
    assert b.next() == 0.5


def test_parse_serve():
    spec = parse_serve("embedding=openai-compatible:http://127.0.0.1:8000/v1,model=e5,width=384")
    assert (spec.role, spec.kind, spec.target, spec.model, spec.width) == (
        Role.EMBEDDING,
        "openai-compatible",
        "http://127.0.0.1:8000/v1",
        "e5",
        384,
    )
    assert parse_serve("code-embedding=in-process").kind == "in-process"
    assert parse_serve("reranker=tei:http://h:8080").target == "http://h:8080"
    for bad in (
        "embedding",
        "nope=in-process",
        "embedding=gpu",
        "embedding=tei",
        "embedding=tei:http://x,width=a",
    ):
        with pytest.raises(ConfigError):
            parse_serve(bad)


async def test_config_merges_field_by_field_and_keeps_the_key():
    sc = Sidecar("s", {Role.CODE_EMBEDDING: HashEmbedder()}, openrouter_base_url="http://127.0.0.1:9/api/v1")
    first = p.parse_frame(
        p.encode_config(
            "c1",
            {
                Role.RERANKER: p.RoleConfig(
                    policy="aggregate", model="qwen/qwen3-reranker-8b", fallback="any"
                ),
                Role.EMBEDDING: p.RoleConfig(policy="aggregate", model="m", upstream="alpha", width=384),
            },
            "sk-or-v1-" + "a" * 64,
        )
    )
    ack = await sc.apply_config(first)
    assert ack.key_present and ack.cloud_roles == [Role.EMBEDDING, Role.RERANKER]
    assert "sk-or" not in repr(sc) and "aaaa" not in repr(sc.__dict__)
    # Keyless, partial: only the named field changes; the key stays.
    ack = await sc.apply_config(
        p.parse_frame(p.encode_config("c2", {Role.RERANKER: p.RoleConfig(policy="local")}))
    )
    assert ack.key_present and ack.cloud_roles == [Role.EMBEDDING]
    assert sc.config[Role.RERANKER].model == "qwen/qwen3-reranker-8b"
    # A null sent explicitly (a pin removed) does reach the sidecar: no cloud embedding then.
    ack = await sc.apply_config(
        p.parse_frame(p.encode_config("c3", {Role.EMBEDDING: p.RoleConfig(upstream=None)}))
    )
    assert ack.cloud_roles == []
    ack = await sc.apply_config(p.parse_frame(p.encode_config("c4", {}, forget_key=True)))
    assert not ack.key_present


async def test_commands_for_unserved_routes_and_missing_key_answer_typed_errors():
    sc = Sidecar("s", {Role.CODE_EMBEDDING: HashEmbedder()})
    await sc.apply_config(
        p.parse_frame(p.encode_config("c", {Role.RERANKER: p.RoleConfig(policy="cloud", model="r")}))
    )
    cmd = p.Command(
        id="1", op="rerank", role=Role.RERANKER, route="cloud", payload={"query": "q", "documents": ["d"]}
    )
    assert (await sc.execute(cmd)).error.code == "KeyMissing"
    cmd = p.Command(id="2", op="embed", role=Role.EMBEDDING, route="local", payload={"texts": ["x"]})
    res = await sc.execute(cmd)
    assert res.error.code == "NotServed" and not res.error.retryable
    cmd = p.Command(id="3", op="embed", role=Role.CODE_EMBEDDING, route="local", payload={"texts": "x"})
    res = await sc.execute(cmd)
    assert res.error.code == "InvalidPayload"
    ok = await sc.execute(
        p.Command(id="4", op="embed", role=Role.CODE_EMBEDDING, route="local", payload={"texts": ["x", "y"]})
    )
    assert ok.ok and p.decode_vectors(ok.payload).shape == (2, 8)


def test_throttles_keep_their_kind_and_wait():
    info = error_info(RateLimited("429 from OpenRouter", retry_after=3.0))
    assert (info.code, info.throttle_kind, info.retry_after, info.retryable) == (
        "RateLimited",
        "429",
        3.0,
        True,
    )
    info = error_info(InFlightBudgetExhausted("402", retry_after=1.5))
    assert (info.throttle_kind, info.retry_after) == ("402", 1.5)
    assert error_info(RuntimeError("boom sk-or-v1-abc")).message == "boom sk-or-***"


async def test_tei_backend_speaks_tei():
    """Against an HTTP server speaking TEI's documented /info, /embed and /rerank shapes."""
    app = FastAPI()
    enc = HashEmbedder(width=6)

    @app.get("/info")
    async def info():
        return {"model_id": "BAAI/bge-small"}

    @app.post("/embed")
    async def embed(body: dict):
        return (await enc.embed(body["inputs"])).tolist()

    @app.post("/rerank")
    async def rerank(body: dict):
        scores = await enc.rerank(body["query"], body["texts"])
        return sorted(({"index": i, "score": s} for i, s in enumerate(scores)), key=lambda x: -x["score"])

    async with serve_in_loop(app) as url:
        backend = await open_backend(parse_serve(f"embedding=tei:{url}"))
        assert backend.info.model == "BAAI/bge-small" and backend.info.width == 6
        vectors = await backend.embed(["a", "b"])
        assert vectors.shape == (2, 6)
        assert await backend.rerank("red fox", ["a red fox", "blue", "fox"]) == [2.0, 0.0, 1.0]
        narrow = TEIBackend(url, role=Role.EMBEDDING, model="m", width=5)
        with pytest.raises(BackendError, match="width 5"):
            await narrow.embed(["a"])
        await narrow.aclose()
        await backend.aclose()


def test_a_tls_failure_on_wss_says_to_dial_ws():
    import ssl

    from fathom.fleet.agent import tls_hint

    hint = tls_hint(
        "wss://127.0.0.1:8765", ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    )
    assert "ws://127.0.0.1:8765" in hint and "plain HTTP" in hint
    assert tls_hint("ws://127.0.0.1:8765", ssl.SSLError(1, "x")) == ""
    assert tls_hint("wss://127.0.0.1:8765", ConnectionRefusedError()) == ""
