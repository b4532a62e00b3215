"""Local LLMs for the stateless roles, over real HTTP against a separate process: the scripted
OpenAI-compatible server (`fathom.devtools.localserver`) that stands in for Ollama, vLLM or
llama.cpp's server, since no model can be downloaded here.

- the chat backend (`--serve rlm=openai-compatible:…`): streamed and not, tools passed through,
  every refusal the cloud client's typed error;
- the reranker backends: OpenAI-compatible `/v1/rerank` and TEI's `/rerank`;
- one machine without a server: FATHOM_LOCAL_CHAT_URL in the settings, the standalone router,
  MCP tools listed only with a local LLM, the CLI's refusals and its live steps;
- explore with a small model's mistakes: malformed, text-written and unknown tool calls get a
  bounded number of corrective messages; a model that keeps at it is stopped; a full context
  and a hung server stop the loop with what was found so far.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from mcp import Client
from typer.testing import CliRunner

from fathom.agents import Explorer, Limits
from fathom.agents.routes import local_chat_providers, standalone_router
from fathom.agents.tools import TOOL_SPECS
from fathom.cli import app
from fathom.config import Settings
from fathom.devtools.localserver.app import prompt_tokens
from fathom.errors import ConfigError
from fathom.fleet.backends import (
    BackendUnavailable,
    OpenAICompatibleChat,
    OpenAICompatibleReranker,
    TEIBackend,
    open_backend,
    parse_serve,
)
from fathom.inference.budget import CloudBudget
from fathom.inference.openrouter import (
    BadRequest,
    ContextLengthExceeded,
    ModelNotFound,
    OpenRouterClient,
    StreamError,
    UpstreamError,
)
from fathom.inference.provider import Kind
from fathom.policy import Policy
from fathom.roles import FallbackMode, Role
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom
from tests.agents.agents_fixtures import cloud, make_router, routing
from tests.fake_clock import FakeClock
from tests.fleet.fleet_fixtures import free_port, wait_for

ASK = [{"role": "user", "content": "where are passwords hashed?"}]


def chat_backend(llm, **options: str) -> str:
    extra = "".join(f",{k}={v}" for k, v in options.items())
    return f"rlm=openai-compatible:{llm.base_url},model={llm.model}{extra}"


def local_fathom(shop, llm, local_encoder, **more) -> Fathom:
    """A second front end on the indexed shop's data dir whose settings name the local LLM."""
    settings = shop.fathom.settings.model_copy(
        update={"local_chat_url": llm.base_url, "local_chat_model": llm.model, **more}
    )
    return Fathom(settings, encoder=local_encoder)


# ---- the chat backend ------------------------------------------------------------------------


async def test_chat_backend_streams_and_passes_tools_through(local_llm):
    local_llm.control.script(
        [
            {
                "content": "Let me search.",
                "tool_calls": [{"name": "grep", "arguments": {"pattern": "pbkdf2"}}],
            },
            {"content": "They are hashed in auth/password.py:8-12."},
        ]
    )
    backend = await open_backend(parse_serve(chat_backend(local_llm)))
    assert isinstance(backend, OpenAICompatibleChat) and backend.info.kind is Kind.LOCAL
    assert backend.info.roles == {Role.RLM} and backend.info.model == local_llm.model
    pieces: list[str] = []
    try:
        first = await backend.chat(ASK, tools=TOOL_SPECS, max_tokens=200, on_delta=pieces.append)
        second = await backend.chat(ASK, max_tokens=200)
    finally:
        await backend.aclose()

    assert first.content == "Let me search." and "".join(pieces) == "Let me search." and len(pieces) == 3
    assert [(c.name, c.arguments, c.problem) for c in first.tool_calls] == [
        ("grep", {"pattern": "pbkdf2"}, None)
    ]
    assert first.finish_reason == "tool_calls" and first.usage["total_tokens"] > 0
    assert second.content == "They are hashed in auth/password.py:8-12." and second.tool_calls == ()
    sent = [r for r in local_llm.control.requests() if r["endpoint"] == "chat"]
    assert [r["stream"] for r in sent] == [True, True]
    assert sent[0]["tools"] == TOOL_SPECS and sent[1]["tools"] is None  # passed through as given
    assert sent[0]["max_tokens"] == 200 and "on_delta" not in sent[0]


async def test_chat_backend_without_streaming(local_llm):
    local_llm.control.script(
        [
            {
                "tool_calls": [
                    {"name": "read_file", "arguments": {"path": "a.py"}},
                    {"name": "list_dir", "arguments": "{not json"},
                ]
            }
        ]
    )
    backend = await open_backend(parse_serve(chat_backend(local_llm, stream="false")))
    try:
        result = await backend.chat(ASK, tools=TOOL_SPECS)
    finally:
        await backend.aclose()
    good, bad = result.tool_calls
    assert (good.name, good.arguments, good.problem) == ("read_file", {"path": "a.py"}, None)
    # The model's malformed call comes back marked, not as a failed request.
    assert bad.name == "list_dir" and bad.arguments == {} and "not valid JSON" in bad.problem
    assert local_llm.control.requests()[-1]["stream"] is None
    assert local_llm.control.counters()["streamed"] == 0


async def test_chat_refusals_are_the_cloud_clients_typed_errors(local_llm):
    backend = OpenAICompatibleChat(local_llm.base_url, roles=[Role.RLM], model=local_llm.model, timeout=1.0)
    missing = OpenAICompatibleChat(local_llm.base_url, roles=[Role.RLM], model="llama-not-pulled")
    try:
        with pytest.raises(ModelNotFound) as info:
            await missing.chat(ASK)
        assert not info.value.retryable and isinstance(info.value, BadRequest)
        assert "llama-not-pulled" in str(info.value) and "serves" in str(info.value)

        local_llm.control.context(100)
        with pytest.raises(ContextLengthExceeded) as info:
            await backend.chat(ASK, max_tokens=500)
        assert "maximum context length is 100 tokens" in str(info.value) and not info.value.retryable
        local_llm.control.context(8192)

        local_llm.control.fail(503, message="Service Unavailable", kind="ServiceUnavailableError")
        with pytest.raises(UpstreamError) as info:
            await backend.chat(ASK)
        assert info.value.retryable and info.value.status == 503

        local_llm.control.script(
            [
                {
                    "content": "half an answer that breaks",
                    "stream_error": {"after_chunks": 2, "message": "CUDA out of memory"},
                }
            ]
        )
        with pytest.raises(StreamError) as info:
            await backend.chat(ASK)
        assert info.value.partial == "half an " and "CUDA out of memory" in str(info.value)

        local_llm.control.delay(5)  # longer than the backend's 1 s timeout
        with pytest.raises(UpstreamError, match="did not answer in time"):
            await backend.chat(ASK)
        local_llm.control.delay(0)
    finally:
        await backend.aclose()
        await missing.aclose()

    gone = OpenAICompatibleChat(f"http://127.0.0.1:{free_port()}/v1", roles=[Role.RLM], model="m")
    with pytest.raises(BackendUnavailable, match="check that the server is running"):
        await gone.chat(ASK)
    await gone.aclose()


async def test_the_cloud_client_maps_the_same_refusals_to_the_same_types(local_llm):
    # One wire, one set of types: OpenRouter's client reads an OpenAI-compatible server's
    # refusals (vLLM's body carries OpenAI's `error` object) into the very same classes.
    client = OpenRouterClient("sk-or-v1-test-not-a-real-key", base_url=local_llm.base_url)
    try:
        with pytest.raises(ModelNotFound):
            await client.chat("llama-not-pulled", ASK)
        local_llm.control.context(100)
        with pytest.raises(ContextLengthExceeded):
            await client.chat(local_llm.model, ASK, max_tokens=500, stream=True)
    finally:
        await client.aclose()


def test_serve_specs_for_the_chat_roles():
    spec = parse_serve("code-assistant=openai-compatible:http://127.0.0.1:11434/v1,model=qwen2.5-coder:7b")
    assert (spec.role, spec.kind, spec.model) == (
        Role.CODE_ASSISTANT,
        "openai-compatible",
        "qwen2.5-coder:7b",
    )
    assert parse_serve("rlm=openai:http://h:8000/v1,model=m,stream=false,timeout=60").options == {
        "stream": "false",
        "timeout": "60",
    }
    for bad, why in [
        ("rlm=tei:http://h:8080", "served by a chat model"),
        ("code-assistant=in-process", "served by a chat model"),
        ("rlm=openai-compatible:http://h/v1,stream=maybe", "stream must be true or false"),
        ("rlm=openai-compatible:http://h/v1,timeout=0", "timeout must be a positive"),
        ("embedding=openai-compatible:http://h/v1,stream=false", "chat roles only"),
    ]:
        with pytest.raises(ConfigError, match=why):
            parse_serve(bad)


# ---- the reranker backends -------------------------------------------------------------------


DOCS = ["retry the network call with backoff", "hash a password with a salt", "render the invoice"]


async def test_openai_compatible_and_tei_rerankers(local_llm):
    oai = await open_backend(
        parse_serve(f"reranker=openai-compatible:{local_llm.base_url},model={local_llm.model}")
    )
    tei = await open_backend(parse_serve(f"reranker=tei:{local_llm.root_url}"))
    try:
        assert isinstance(oai, OpenAICompatibleReranker) and isinstance(tei, TEIBackend)
        assert tei.info.model == local_llm.model  # from TEI's /info
        for backend in (oai, tei):
            scores = await backend.rerank("hash password salt", DOCS)
            assert scores == pytest.approx([0.0, 1.0, 0.0])  # in the documents' order
    finally:
        await oai.aclose()
        await tei.aclose()
    # Each was probed once at start, then asked once.
    assert local_llm.control.counters()["requests"] == {"rerank": 2, "tei-rerank": 2}


async def test_a_server_that_cannot_rerank_is_refused_at_start(local_llm):
    local_llm.control.fail(404, message="Not Found", kind="NotFound", endpoints=["rerank"])
    with pytest.raises(ConfigError, match="cannot rerank.*offers /rerank"):
        await open_backend(
            parse_serve(f"reranker=openai-compatible:{local_llm.base_url},model={local_llm.model}")
        )


# ---- one machine, no server ------------------------------------------------------------------


def test_settings_name_a_local_llm_per_role(monkeypatch, tmp_path):
    monkeypatch.setenv("FATHOM_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("FATHOM_LOCAL_CHAT_URL", "http://127.0.0.1:11434/v1")
    monkeypatch.setenv("FATHOM_LOCAL_CHAT_MODEL", "qwen2.5-coder:7b")
    monkeypatch.setenv("FATHOM_LOCAL_RLM_URL", "http://127.0.0.1:8000/v1")
    settings = Settings()
    assert settings.local_chat(Role.CODE_ASSISTANT) == ("http://127.0.0.1:11434/v1", "qwen2.5-coder:7b")
    assert settings.local_chat(Role.RLM) == ("http://127.0.0.1:8000/v1", "qwen2.5-coder:7b")
    providers = local_chat_providers(settings)
    assert {p.info.roles for p in providers} == {frozenset({Role.CODE_ASSISTANT}), frozenset({Role.RLM})}
    assert all(p.info.kind is Kind.LOCAL for p in providers)

    monkeypatch.delenv("FATHOM_LOCAL_RLM_URL")
    shared = local_chat_providers(Settings())
    assert len(shared) == 1 and shared[0].info.roles == {Role.CODE_ASSISTANT, Role.RLM}

    monkeypatch.delenv("FATHOM_LOCAL_CHAT_MODEL")
    with pytest.raises(ConfigError, match="FATHOM_LOCAL_CHAT_MODEL .or FATHOM_LOCAL_RLM_MODEL"):
        Settings().local_chat(Role.RLM)
    monkeypatch.delenv("FATHOM_LOCAL_CHAT_URL")
    assert Settings().local_chat(Role.RLM) is None and local_chat_providers(Settings()) == []


async def test_standalone_mcp_serves_ask_and_explore_from_the_local_llm(
    indexed_shop,
    local_llm,
    local_encoder,
    emulator,
):
    fathom = local_fathom(indexed_shop, local_llm, local_encoder)
    local_llm.control.script(
        [
            {"match": "Context:", "content": "PBKDF2 with a random salt [1]."},
            {"tool_calls": [{"name": "search_code", "arguments": {"query": "password hashing"}}]},
            {"tool_calls": [{"name": "grep", "arguments": {"pattern": "pbkdf2_hmac"}}]},
            {
                "tool_calls": [
                    {
                        "name": "read_file",
                        "arguments": {"path": "auth/password.py", "start_line": 8, "end_line": 12},
                    }
                ]
            },
            {"content": "hash_password uses PBKDF2 (auth/password.py:8-12)."},
        ]
    )
    async with Client(build_mcp_server(fathom)) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"ask", "explore"} <= names
        asked = await client.call_tool("ask", {"question": "how are passwords hashed?", "project": "shop"})
        assert not asked.is_error, asked.content[0].text
        a = asked.structured_content
        assert a["provider"] == f"openai-compatible:{local_llm.base_url}:{local_llm.model}"
        assert a["citations"] and a["citations"][0].startswith("auth/password.py:")
        explored = await client.call_tool(
            "explore", {"question": "how are passwords hashed?", "project": "shop"}
        )
        assert not explored.is_error, explored.content[0].text
        e = explored.structured_content
        assert e["complete"] and [t["tool"] for t in e["trace"]] == ["search_code", "grep", "read_file"]
        assert all(t["ok"] for t in e["trace"]) and e["citations"] == ["auth/password.py:8-12"]
    assert local_llm.control.counters()["requests"] == {"chat": 5}
    assert emulator.control.counters()["requests"] == {}


def test_cli_explore_shows_each_step_and_refuses_without_a_local_llm(
    indexed_shop,
    local_llm,
    local_encoder,
):
    local_llm.control.script(
        [
            {"tool_calls": [{"name": "list_dir", "arguments": {"path": "auth"}}]},
            {"tool_calls": [{"name": "grep", "arguments": {"pattern": "compare_digest"}}]},
            {"content": "In constant time, auth/password.py:19."},
        ]
    )
    runner = CliRunner()
    fathom = local_fathom(indexed_shop, local_llm, local_encoder)
    result = runner.invoke(
        app,
        ["explore", "how is a password checked?", "-p", "shop"],
        obj={"fathom": fathom},
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    step1 = next(i for i, ln in enumerate(lines) if ln.startswith("0.1 list_dir(path='auth')"))
    step2 = next(i for i, ln in enumerate(lines) if ln.startswith("0.2 grep(pattern='compare_digest')"))
    answer = next(i for i, ln in enumerate(lines) if ln.startswith("In constant time"))
    assert step1 < step2 < answer and "1 matches" in lines[step2]
    assert "citations: auth/password.py:19" in result.output

    plain = Fathom(indexed_shop.fathom.settings, encoder=local_encoder)  # no FATHOM_LOCAL_CHAT_URL
    result = runner.invoke(app, ["ask", "how?", "-p", "shop"], obj={"fathom": plain}, env={"COLUMNS": "300"})
    assert result.exit_code == 1 and "FATHOM_LOCAL_CHAT_URL" in result.output


# ---- explore with a small model's mistakes ---------------------------------------------------


def explorer_on(fathom: Fathom, **limits) -> tuple[Explorer, list]:
    steps: list = []
    router = standalone_router(fathom)
    return Explorer.for_project(fathom, router, "shop", limits=Limits(**limits), on_step=steps.append), steps


async def test_malformed_tool_calls_are_corrected_and_the_run_recovers(
    indexed_shop,
    local_llm,
    local_encoder,
):
    local_llm.control.script(
        [
            {"tool_calls": [{"name": "grep", "arguments": '{"pattern": "pbkdf2_hmac"'}]},  # cut-off JSON
            {
                "tool_calls": [{"name": "open_file", "arguments": {"path": "auth/password.py"}}]
            },  # no such tool
            {"content": '<tool_call>{"name": "grep", "arguments": {"pattern": "pbkdf2_hmac"}}</tool_call>'},
            {"tool_calls": [{"name": "grep", "arguments": {"pattern": "pbkdf2_hmac"}}]},
            {"content": "PBKDF2, auth/password.py:10."},
        ]
    )
    explorer, steps = explorer_on(local_fathom(indexed_shop, local_llm, local_encoder))
    result = await explorer.explore("which function derives the key?")

    assert result.complete and result.answer == "PBKDF2, auth/password.py:10."
    assert [s.summary.split(":")[0] for s in result.trace] == [
        "corrected (1 of 3)",
        "corrected (2 of 3)",
        "corrected (3 of 3)",
        "grep /pbkdf2_hmac/",
    ]
    assert [s.tool for s in result.trace] == ["grep", "open_file", "grep", "grep"] and result.trace[3].ok
    assert steps == result.trace  # each one heard as it happened
    sent = [r for r in local_llm.control.requests() if r["endpoint"] == "chat"]
    assert len(sent) == 5 and local_llm.control.counters()["refused"] == {}  # a strict server took every turn
    told = [m["content"] for r in sent for m in r["messages"][-1:]]
    assert "cannot run: its arguments are not valid JSON" in told[1]
    assert "there is no tool named 'open_file'" in told[2]
    assert "wrote a call to grep as text, so nothing ran" in told[3]


async def test_a_model_that_keeps_making_malformed_calls_is_stopped(
    indexed_shop,
    local_llm,
    local_encoder,
):
    local_llm.control.script(
        [{"tool_calls": [{"name": "grep", "arguments": "pattern=pbkdf2"}]}] * 3
        + [{"tool_calls": [{"name": "list_dir", "arguments": {}}]}]
    )
    explorer, _ = explorer_on(local_fathom(indexed_shop, local_llm, local_encoder), max_corrections=2)
    result = await explorer.explore("which function derives the key?")

    assert result.stopped.startswith(
        "stopped: correction limit 2 reached: the model kept making tool "
        "calls that cannot run (last: your call to grep cannot run"
    )
    assert result.answer.startswith(result.stopped) and result.limits_hit == [result.stopped]
    assert [s.ok for s in result.trace] == [False, False, False]
    assert result.trace[-1].summary.startswith("not corrected")
    assert local_llm.control.counters()["requests"] == {"chat": 3}  # nothing sent after the stop


async def test_a_full_context_stops_the_loop_with_the_evidence_so_far(
    indexed_shop,
    local_llm,
    local_encoder,
):
    question = "what does auth/password.py do?"
    explorer, _ = explorer_on(local_fathom(indexed_shop, local_llm, local_encoder))
    local_llm.control.script([{"content": "a first answer, to measure the first turn"}])
    await explorer.explore(question)
    first = local_llm.control.requests()[-1]
    # The model's context holds the first turn (and its max_tokens), not the file read into it.
    local_llm.control.context(prompt_tokens(first["messages"], first["tools"]) + first["max_tokens"] + 50)
    local_llm.control.script(
        [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "auth/password.py"}}]},
            {"content": "never reached"},
        ]
    )
    result = await explorer.explore(question)

    assert result.stopped.startswith("stopped: context limit of the model reached")
    assert "Evidence seen so far: auth/password.py:1-19" in result.answer
    assert [s.tool for s in result.trace] == ["read_file"]
    assert local_llm.control.counters()["refused"] == {"400": 1}


async def test_the_time_limit_cuts_a_hung_model(indexed_shop, local_llm, local_encoder):
    local_llm.control.delay(30)  # the server hangs; the loop's deadline must not wait for it
    explorer, _ = explorer_on(local_fathom(indexed_shop, local_llm, local_encoder), max_seconds=60)
    explorer.clock = clock = FakeClock(auto_advance=False)
    t0 = time.monotonic()
    task = asyncio.ensure_future(explorer.explore("anything"))
    await wait_for(lambda: local_llm.control.counters()["requests"].get("chat") == 1, what="the request")
    clock.advance(61)  # the deadline passes while the server still holds the request
    result = await asyncio.wait_for(task, 10)
    assert result.stopped == "stopped: time limit 60s reached"
    assert time.monotonic() - t0 < 20  # not the server's 30 s


async def test_a_request_held_across_a_reset_takes_no_turn_of_the_next_script(local_llm):
    # A hung model's request outlives the test that made it; after the reset it must not eat
    # the first turn of the next test's script (the next test would see its turns shifted).
    local_llm.control.delay(30)
    body = {"model": local_llm.model, "messages": ASK}
    async with httpx.AsyncClient(timeout=20) as http:
        held = asyncio.ensure_future(http.post(local_llm.base_url + "/chat/completions", json=body))
        await wait_for(lambda: local_llm.control.counters()["requests"].get("chat") == 1, what="the request")
        local_llm.control.reset()
        local_llm.control.script([{"content": "the next test's first turn"}])
        answer = await asyncio.wait_for(held, 15)  # released by the reset, not after 30 s
        assert answer.status_code == 503 and "reset while this request waited" in answer.text
        assert local_llm.control.counters()["turns_left"] == 1
        after = await http.post(local_llm.base_url + "/chat/completions", json=body)
    assert after.json()["choices"][0]["message"]["content"] == "the next test's first turn"


async def test_each_step_is_reported_before_the_next_model_turn(
    indexed_shop,
    local_llm,
    local_encoder,
):
    local_llm.control.script(
        [
            {"tool_calls": [{"name": "list_dir", "arguments": {}}]},
            {"tool_calls": [{"name": "list_dir", "arguments": {"path": "net"}}]},
            {"content": "Four folders."},
        ]
    )
    fathom = local_fathom(indexed_shop, local_llm, local_encoder)
    heard: list[tuple[int, int]] = []
    explorer = Explorer.for_project(
        fathom,
        standalone_router(fathom),
        "shop",
        on_step=lambda s: heard.append(
            (s.step, httpx.get(local_llm.root_url + "/control/counters").json()["requests"]["chat"])
        ),
    )
    result = await explorer.explore("what is here?")
    assert result.complete and heard == [(1, 1), (2, 2)]  # step n heard after n model turns, not at the end


@pytest.mark.parametrize("rlm_fallback, cloud_reranks", [(FallbackMode.LOCAL_ONLY, 0), (FallbackMode.ANY, 1)])
async def test_a_local_only_exploration_never_reranks_in_the_cloud(
    indexed_shop,
    local_llm,
    emulator,
    rlm_fallback,
    cloud_reranks,
):
    # The reranker role may use the cloud (aggregate, fallback any), and only a cloud reranker is
    # registered. rlm is served locally either way (policy local); only its fallback mode differs.
    local_llm.control.script(
        [
            {"tool_calls": [{"name": "search_code", "arguments": {"query": "password"}}]},
            {"content": "auth/password.py:8-12"},
        ]
    )
    chat = OpenAICompatibleChat(local_llm.base_url, roles=[Role.RLM], model=local_llm.model)
    router = make_router(
        routing(rlm=(Policy.LOCAL, rlm_fallback), reranker=(Policy.AGGREGATE, FallbackMode.ANY)),
        [chat, cloud(emulator, Role.RERANKER, CloudBudget())],
    )
    try:
        result = await Explorer.for_project(indexed_shop.fathom, router, "shop", reranker=router).explore(
            "where?"
        )
    finally:
        await chat.aclose()
    assert result.complete and result.trace[0].ok
    assert emulator.control.counters()["requests"].get("rerank", 0) == cloud_reranks
    assert set(emulator.control.counters()["requests"]) <= {"rerank"}


async def test_through_a_sidecar_mistakes_stay_marked_and_refusals_stay_typed(fleet, local_llm):
    backend = OpenAICompatibleChat(local_llm.base_url, roles=[Role.RLM], model=local_llm.model)
    fleet.hub.auth.approve("gpu-llm")
    await fleet.start_sidecar("gpu-llm", {Role.RLM: backend}, backend_kinds={Role.RLM: "openai-compatible"})
    await wait_for(lambda: "sidecar:gpu-llm:rlm:local" in fleet.registry, what="the sidecar's rlm route")
    provider = fleet.registry.get("sidecar:gpu-llm:rlm:local")
    assert provider.info.kind is Kind.LOCAL

    local_llm.control.script([{"tool_calls": [{"name": "grep", "arguments": "{oops"}]}])
    result = await provider.chat(ASK, tools=TOOL_SPECS, max_tokens=100)
    (call,) = result.tool_calls
    assert call.name == "grep" and "not valid JSON" in call.problem  # the model's mistake, marked
    assert local_llm.control.requests()[-1]["tools"] == TOOL_SPECS  # passed through the fleet

    local_llm.control.context(50)
    with pytest.raises(ContextLengthExceeded, match="sidecar gpu-llm: .*maximum context length is 50"):
        await provider.chat(ASK, max_tokens=100)


async def test_requests_too_long_for_the_model_never_eject_it(local_llm):
    from fathom.inference.router import NoRoute, call_role

    backend = OpenAICompatibleChat(local_llm.base_url, roles=[Role.RLM], model=local_llm.model)
    router = make_router(routing(rlm=(Policy.LOCAL, FallbackMode.LOCAL_ONLY)), [backend])
    local_llm.control.context(50)
    try:
        for _ in range(router.eject_after + 1):  # more than enough failures to eject a sick provider
            with pytest.raises(NoRoute) as info:
                await call_role(router, Role.RLM, lambda p: p.chat(ASK, max_tokens=100))
            assert isinstance(info.value.__cause__, ContextLengthExceeded)
        assert router.registry.available(backend.id)  # still in service: the requests were too long
        local_llm.control.context(8192)
        assert (await call_role(router, Role.RLM, lambda p: p.chat(ASK))).value.content.startswith("echo:")
    finally:
        await backend.aclose()


def test_stream_and_timeout_come_from_the_settings_or_the_backend(monkeypatch, tmp_path):
    monkeypatch.setenv("FATHOM_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("FATHOM_LOCAL_CHAT_URL", "http://127.0.0.1:11434/v1")
    monkeypatch.setenv("FATHOM_LOCAL_CHAT_MODEL", "m")
    (default,) = local_chat_providers(Settings())
    assert default.stream is True and default._http.timeout.read == 300.0
    monkeypatch.setenv("FATHOM_LOCAL_CHAT_STREAM", "false")
    monkeypatch.setenv("FATHOM_LOCAL_CHAT_TIMEOUT", "42")
    (tuned,) = local_chat_providers(Settings())
    assert tuned.stream is False and tuned._http.timeout.read == 42.0
