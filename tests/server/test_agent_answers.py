"""`ask` and `explore` hold their answers to `max_tokens`, as the search tools do: through a
real MCP client session, a local LLM at the Provider cut-off answering at length."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mcp import Client

from fathom.config import Settings
from fathom.inference.provider import ChatResult
from fathom.inference.registry import ProviderRegistry
from fathom.policy import Policy
from fathom.roles import EMBEDDING_ROLES, FallbackMode
from fathom.server.agent_answers import cost, fit_answer
from fathom.server.answer_tokens import AnswerTokens, tokens_of
from fathom.server.mcp_agents import ExploreResult, TraceEntry
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom
from tests.agents.agents_fixtures import LocalChat, make_router, routing, tool_turn
from tests.fleet.fleet_fixtures import HashEmbedder
from tests.server.admin_fixtures import make_project

LONG = " ".join(f"word{i}" for i in range(12000)) + " (app.py:1)."


async def test_ask_and_explore_answers_fit_max_tokens(tmp_path: Path):
    encoder = HashEmbedder(width=8)
    encoder.info = dataclasses.replace(encoder.info, roles=frozenset(EMBEDDING_ROLES))
    fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=encoder, registry=ProviderRegistry())
    await fathom.index(make_project(tmp_path / "demo"), "demo")
    local = (Policy.LOCAL, FallbackMode.LOCAL_ONLY)
    chat = LocalChat(
        [
            ChatResult(content=LONG, usage={"total_tokens": 10}),
            *(tool_turn("grep", pattern=f"add{i}") for i in range(10)),
            ChatResult(content=LONG, usage={"total_tokens": 10}),
        ]
    )
    router = make_router(routing(code_assistant=local, rlm=local), [chat])
    tokens = tokens_of(fathom)
    async with Client(build_mcp_server(fathom, router=router)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for name in ("ask", "explore"):
            bounds = tools[name].input_schema["properties"]["max_tokens"]
            assert (bounds["minimum"], bounds["maximum"], bounds["default"]) == (1000, 20000, 8000)
        asked = await client.call_tool(
            "ask", {"question": "what adds?", "project": "demo", "max_tokens": 2000}
        )
        assert not asked.is_error, asked.content[0].text
        a = asked.structured_content
        assert a["truncated"] is True and a["answer"].startswith("word0 word1"), a["answer"][:200]
        assert a["answer"].endswith("…"), a["answer"][-200:]
        assert 2 * tokens.total(asked.content[0].text) <= 2000  # what the client was sent
        explored = await client.call_tool(
            "explore", {"question": "what adds?", "project": "demo", "max_tokens": 1500, "max_steps": 12}
        )
        assert not explored.is_error, explored.content[0].text
        e = explored.structured_content
        assert e["truncated"] is True and e["trace_omitted"] > 0 and e["trace"] == []
        assert 2 * tokens.total(explored.content[0].text) <= 1500


def test_the_trace_gives_way_before_the_answer():
    tokens = AnswerTokens(key="estimate")
    steps = [
        TraceEntry(depth=0, step=i, tool="grep", args={"pattern": "x" * 50}, summary="y" * 200, ok=True)
        for i in range(40)
    ]
    answer = ExploreResult(
        question="q",
        answer="short answer (a.py:1)",
        complete=True,
        stopped=None,
        citations=["a.py:1"],
        unverified=[],
        limits_hit=[],
        sub_questions=0,
        tokens_used=5,
        trace=steps,
    )
    fitted = fit_answer(answer, 2000, tokens)
    assert cost(fitted, tokens) <= 2000 and fitted.answer == answer.answer and not fitted.truncated
    assert fitted.trace == steps[: len(fitted.trace)] and fitted.trace_omitted == 40 - len(fitted.trace) > 0
    assert fit_answer(answer, 20000, tokens) == answer  # within the budget: untouched
