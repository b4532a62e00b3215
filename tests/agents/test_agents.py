"""`ask` and `explore` against the emulator's scripted chat model over real HTTP, on a real
indexed project; the fallback mode; the tools' confinement to the project root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fathom.agents import (
    CodeAssistant,
    Explorer,
    ExploreUnavailable,
    Limits,
    ProjectTools,
    fallback_status,
)
from fathom.config import RoleRoute
from fathom.inference.budget import CloudBudget
from fathom.inference.provider import ChatResult
from fathom.inference.router import CloudForbidden, call_role
from fathom.policy import Policy
from fathom.roles import DEFAULTS, FallbackMode, Role
from tests.agents.agents_fixtures import LocalChat, TickClock, cloud, make_router, routing, tool_turn

RLM_MODEL = DEFAULTS[Role.RLM].model
ASSISTANT_MODEL = DEFAULTS[Role.CODE_ASSISTANT].model
# Explore tests let rlm use the cloud explicitly: its default (local-only) would refuse.
RLM_CLOUD = routing(rlm=(Policy.CLOUD, FallbackMode.ANY))


def chat_requests(emulator) -> int:
    return emulator.control.counters()["requests"].get("chat", 0)


# ---- ask ------------------------------------------------------------------------------------


async def test_ask_answers_citing_retrieved_files(indexed_shop, emulator):
    emulator.control.script(
        [
            {
                "content": (
                    "Passwords are hashed with PBKDF2-HMAC-SHA256 and a random salt [1], and checked in "
                    "constant time (auth/password.py:15-19). See also [42] and ghost/nowhere.py:1-3."
                )
            }
        ]
    )
    budget = CloudBudget()
    router = make_router(
        routing(code_assistant=(Policy.AGGREGATE, FallbackMode.ANY)),
        [cloud(emulator, Role.CODE_ASSISTANT, budget)],
    )
    assistant = CodeAssistant(indexed_shop.fathom, router, k_code=4, k_docs=2)

    answer = await assistant.ask("how are passwords hashed and verified?", indexed_shop.project)

    assert answer.answer.startswith("Passwords are hashed")
    assert answer.provider == f"openrouter:{ASSISTANT_MODEL}@any" and answer.model == ASSISTANT_MODEL
    labels = [str(c) for c in answer.citations]
    assert "auth/password.py:15-19" in labels
    assert answer.citations[0].block == 1 and answer.context[0].span.path == "auth/password.py"
    for c in answer.citations:  # every citation is a real file and lines that were retrieved
        lines = (indexed_shop.root / c.path).read_text().splitlines()
        assert 1 <= c.start_line <= c.end_line <= len(lines)
        assert any(b.span.path == c.path and b.span.start_line == c.start_line for b in answer.context)
    assert any("[42]" in r for r in answer.rejected)
    assert any("ghost/nowhere.py:1-3" in r and "not in the retrieved context" in r for r in answer.rejected)
    assert {b.table for b in answer.context} == {"code", "docs"}
    assert budget.state().granted_total == 1
    assert emulator.control.counters()["by_model"] == {ASSISTANT_MODEL: 1}


async def test_ask_prompt_has_numbered_blocks_labelled_path_and_lines(indexed_shop, emulator):
    # No script: the emulator echoes the last user message, i.e. the prompt itself.
    router = make_router(
        routing(code_assistant=(Policy.CLOUD, FallbackMode.ANY)),
        [cloud(emulator, Role.CODE_ASSISTANT, CloudBudget())],
    )
    answer = await CodeAssistant(indexed_shop.fathom, router, k_code=3, k_docs=1).ask(
        "retry with backoff", indexed_shop.project
    )
    assert answer.answer.startswith("echo: Context:")
    for block in answer.context:
        label = f"{block.span.path}:{block.span.start_line}"
        if block.span.end_line != block.span.start_line:
            label += f"-{block.span.end_line}"
        assert f"[{block.number}] {label} (" in answer.answer
    assert answer.answer.rstrip().endswith("Question: retry with backoff")
    assert [c.block for c in answer.citations] == [b.number for b in answer.context]


# ---- explore: the loop -----------------------------------------------------------------------


async def test_explore_runs_a_multi_step_loop_with_a_subquestion(indexed_shop, emulator):
    emulator.control.script(
        [
            {
                "tool_calls": [
                    {"name": "search_code", "arguments": {"query": "password hashing"}},
                    {"name": "list_dir", "arguments": {"path": "."}},
                ]
            },
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "../../etc/passwd"}}]},
            {
                "tool_calls": [
                    {
                        "name": "read_file",
                        "arguments": {"path": "auth/password.py", "start_line": 8, "end_line": 12},
                    }
                ]
            },
            {
                "tool_calls": [
                    {
                        "name": "ask_subquestion",
                        "arguments": {"question": "How is a stored password verified?"},
                    }
                ]
            },
            # depth 1
            {"tool_calls": [{"name": "grep", "arguments": {"pattern": "compare_digest"}}]},
            {"content": "With hmac.compare_digest, in auth/password.py:15-19."},
            # back at depth 0
            {
                "content": "Passwords are hashed with PBKDF2 and a salt (auth/password.py:8-12) and "
                "verified in constant time (auth/password.py:15-19); not in ghost.py:1-2."
            },
        ]
    )
    budget = CloudBudget()
    router = make_router(RLM_CLOUD, [cloud(emulator, Role.RLM, budget)])
    explorer = Explorer.for_project(indexed_shop.fathom, router, indexed_shop.project)

    result = await explorer.explore("How are passwords stored and checked?")

    assert result.complete and result.stopped is None
    assert result.answer.startswith("Passwords are hashed")
    top = [s for s in result.trace if s.depth == 0]
    assert [s.tool for s in top] == ["search_code", "list_dir", "read_file", "read_file", "ask_subquestion"]
    assert len(top) >= 3 and result.sub_questions == 1
    sub = [s for s in result.trace if s.depth == 1]
    assert [s.tool for s in sub] == ["grep"] and "1 matches" in sub[0].summary
    refused = top[2]
    assert refused.args == {"path": "../../etc/passwd"} and not refused.ok
    assert "refused" in refused.summary and "'..'" in refused.summary
    assert top[3].ok and top[3].summary == "read auth/password.py:8-12"  # the loop went on
    assert "code hits: auth/password.py" in top[0].summary
    assert [str(c) for c in result.citations] == ["auth/password.py:8-12", "auth/password.py:15-19"]
    assert len(result.unverified) == 1 and result.unverified[0].startswith("ghost.py:1-2")
    assert chat_requests(emulator) == 7 == budget.state().granted_total  # one permit per turn
    assert result.tokens_used > 0 and result.providers == [f"openrouter:{RLM_MODEL}@any"]
    d = result.as_dict()
    assert d["complete"] and d["trace"][2]["tool"] == "read_file"


async def test_explore_stops_at_the_step_limit(indexed_shop, emulator):
    emulator.control.script([{"tool_calls": [{"name": "list_dir", "arguments": {}}]}] * 4)
    router = make_router(RLM_CLOUD, [cloud(emulator, Role.RLM, CloudBudget())])
    explorer = Explorer.for_project(
        indexed_shop.fathom, router, indexed_shop.project, limits=Limits(max_steps=2)
    )
    result = await explorer.explore("what is in this project?")
    assert result.stopped == "stopped: step limit 2 reached"
    assert result.answer.startswith("stopped: step limit 2 reached")
    assert len(result.trace) == 2 and result.limits_hit == ["stopped: step limit 2 reached"]
    assert chat_requests(emulator) == 3


async def test_explore_refuses_a_subquestion_beyond_the_depth_limit(indexed_shop, emulator):
    emulator.control.script(
        [
            {"tool_calls": [{"name": "ask_subquestion", "arguments": {"question": "what hashes?"}}]},
            # depth 1 = max_depth: its own sub-question is refused, and it answers anyway
            {"tool_calls": [{"name": "ask_subquestion", "arguments": {"question": "deeper?"}}]},
            {"content": "hashlib, see auth/password.py:3"},
            {"content": "It uses hashlib (auth/password.py:3)."},
        ]
    )
    router = make_router(RLM_CLOUD, [cloud(emulator, Role.RLM, CloudBudget())])
    explorer = Explorer.for_project(
        indexed_shop.fathom, router, indexed_shop.project, limits=Limits(max_depth=1)
    )
    result = await explorer.explore("which library hashes passwords?")
    assert result.complete and result.sub_questions == 1
    refused = [s for s in result.trace if s.depth == 1]
    assert len(refused) == 1 and not refused[0].ok
    assert refused[0].summary == "stopped: depth limit 1 reached"
    assert result.limits_hit[0].startswith("stopped: depth limit 1 reached")
    assert [str(c) for c in result.citations] == ["auth/password.py:3"]


async def test_explore_stops_at_the_token_limit(indexed_shop, emulator):
    emulator.control.script([{"tool_calls": [{"name": "list_dir", "arguments": {}}]}] * 3)
    router = make_router(RLM_CLOUD, [cloud(emulator, Role.RLM, CloudBudget())])
    explorer = Explorer.for_project(
        indexed_shop.fathom, router, indexed_shop.project, limits=Limits(max_tokens=50)
    )
    result = await explorer.explore("what is in this project?")
    assert result.stopped.startswith("stopped: token limit 50 reached (used ")
    assert result.tokens_used >= 50 and result.trace == []  # its tool calls never ran
    assert chat_requests(emulator) == 1


async def test_explore_stops_at_the_time_limit(indexed_shop, emulator):
    emulator.control.script([{"tool_calls": [{"name": "list_dir", "arguments": {}}]}] * 3)
    router = make_router(RLM_CLOUD, [cloud(emulator, Role.RLM, CloudBudget())])
    # Every reading of the clock is 10 s later: start 0 (deadline 25), check 10, tool 20,
    # check 30 -> stop. No wall-clock time is involved.
    explorer = Explorer.for_project(
        indexed_shop.fathom, router, indexed_shop.project, limits=Limits(max_seconds=25), clock=TickClock(10)
    )
    result = await explorer.explore("what is in this project?")
    assert result.stopped == "stopped: time limit 25s reached"
    assert len(result.trace) == 1 and chat_requests(emulator) == 1


async def test_a_stopped_subquestion_returns_to_its_parent(indexed_shop, emulator):
    emulator.control.script(
        [
            {"tool_calls": [{"name": "ask_subquestion", "arguments": {"question": "list it all"}}]},
            {"tool_calls": [{"name": "list_dir", "arguments": {}}]},  # depth 1, step 1 of 1
            {"tool_calls": [{"name": "list_dir", "arguments": {"path": "auth"}}]},  # over its limit
            {"content": "The project has auth, billing, net and web."},
        ]
    )
    router = make_router(RLM_CLOUD, [cloud(emulator, Role.RLM, CloudBudget())])
    explorer = Explorer.for_project(
        indexed_shop.fathom, router, indexed_shop.project, limits=Limits(max_steps=2, sub_share=0.5)
    )
    result = await explorer.explore("what is in this project?")
    assert result.complete
    assert result.limits_hit == ["stopped: step limit 1 reached (depth 1)"]
    sub_step = [s for s in result.trace if s.tool == "ask_subquestion"][0]
    assert not sub_step.ok and "step limit 1 reached" in sub_step.summary


# ---- explore: fallback mode ----------------------------------------------------------------


@pytest.mark.parametrize("policy", list(Policy))
async def test_local_only_rlm_never_calls_the_cloud(indexed_shop, emulator, policy):
    emulator.control.script([{"content": "from the cloud"}])
    budget = CloudBudget()
    router = make_router(routing(rlm=(policy, FallbackMode.LOCAL_ONLY)), [cloud(emulator, Role.RLM, budget)])
    explorer = Explorer.for_project(indexed_shop.fathom, router, indexed_shop.project)
    with pytest.raises(ExploreUnavailable) as info:
        await explorer.explore("anything")
    msg = str(info.value)
    assert "explore cannot run" in msg and "local-only" in msg
    assert "never calls the cloud whatever its policy" in msg
    assert info.value.local_only
    assert emulator.control.counters()["requests"] == {}  # zero requests of any kind
    assert budget.state().granted_total == 0


async def test_rlm_default_route_is_local_only(indexed_shop, emulator):
    from fathom.config import RoutingState

    router = make_router(RoutingState(), [cloud(emulator, Role.RLM, CloudBudget())])
    with pytest.raises(ExploreUnavailable):
        await Explorer.for_project(indexed_shop.fathom, router, indexed_shop.project).explore("x")
    assert emulator.control.counters()["requests"] == {}


async def test_local_only_rlm_uses_a_local_llm_and_never_the_cloud(indexed_shop, emulator):
    local = LocalChat(
        [
            tool_turn("grep", pattern="def "),
            ChatResult(content="Functions live in auth/password.py:8-12.", usage={"total_tokens": 10}),
        ]
    )
    router = make_router(
        routing(rlm=(Policy.AGGREGATE, FallbackMode.LOCAL_ONLY)),
        [local, cloud(emulator, Role.RLM, CloudBudget())],
    )
    explorer = Explorer.for_project(indexed_shop.fathom, router, indexed_shop.project)
    result = await explorer.explore("where are functions?")
    assert result.complete and result.providers == ["local:chat"] and len(local.requests) == 2
    assert emulator.control.counters()["requests"] == {}


async def test_call_role_refuses_a_misrouted_cloud_provider(emulator):
    from fathom.inference.router import Router

    class Misrouting(Router):  # a routing bug: hands out the cloud whatever the mode says
        def order(self, role):
            return list(self.registry.list(role))

    state = routing(rlm=(Policy.AGGREGATE, FallbackMode.LOCAL_ONLY))
    base = make_router(state, [cloud(emulator, Role.RLM, CloudBudget())])
    router = Misrouting(state, base.registry, is_cleared=base.is_cleared)
    with pytest.raises(CloudForbidden, match="never calls the cloud whatever its policy"):
        await call_role(router, Role.RLM, lambda p: p.chat([{"role": "user", "content": "x"}]))
    assert emulator.control.counters()["requests"] == {}


def test_fallback_status_states_what_local_only_means():
    for policy in Policy:
        line = fallback_status(RoleRoute(policy=policy, fallback=FallbackMode.LOCAL_ONLY), Role.RLM)
        assert line.startswith("fallback local-only: role rlm never calls the cloud, whatever its policy")
        assert f"({policy})" in line
    assert "cannot run" in fallback_status(RoleRoute(policy=Policy.CLOUD, fallback=FallbackMode.LOCAL_ONLY))
    assert "only while no local provider can serve" in fallback_status(
        RoleRoute(policy=Policy.BACKUP, fallback=FallbackMode.ANY)
    )
    assert "nothing leaves the network" in fallback_status(
        RoleRoute(policy=Policy.LOCAL, fallback=FallbackMode.ANY)
    )


# ---- the tools' confinement ----------------------------------------------------------------


@pytest.fixture
def confined(tmp_path: Path) -> ProjectTools:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("one\ntwo\nthree\n")
    (tmp_path / "secret.txt").write_text("top secret\n")
    os.symlink(tmp_path / "secret.txt", root / "leak.txt")
    os.symlink(tmp_path, root / "up")
    os.symlink(root / "src" / "a.py", root / "alias.py")  # a link that stays inside is fine
    return ProjectTools(root)


@pytest.mark.parametrize(
    "path, reason",
    [
        ("../../etc/passwd", "'..'"),
        ("src/../../secret.txt", "'..'"),
        ("/etc/passwd", "absolute"),
        ("C:\\Windows\\win.ini", "absolute"),
        ("~/secret.txt", "absolute"),
        ("leak.txt", "symbolic link"),
        ("up/secret.txt", "symbolic link"),
    ],
)
async def test_paths_outside_the_root_are_refused(confined, path, reason):
    for tool, args in (
        ("read_file", {"path": path}),
        ("list_dir", {"path": path}),
        ("grep", {"pattern": "secret", "path": path}),
    ):
        out = await confined.run(tool, args)
        assert not out.ok and out.text.startswith("error: refused: path") and reason in out.text
        assert "top secret" not in out.text


async def test_tools_read_inside_the_root(confined):
    out = await confined.run("read_file", {"path": "src/a.py", "start_line": 2, "end_line": 3})
    assert out.ok and "    2  two" in out.text and "    3  three" in out.text
    assert out.summary == "read src/a.py:2-3"
    assert (await confined.run("read_file", {"path": "alias.py"})).ok
    listing = await confined.run("list_dir", {})
    assert "src/" in listing.text and "leak.txt -> (outside the project: refused)" in listing.text
    grep = await confined.run("grep", {"pattern": "secret|two"})
    assert grep.ok and grep.text == "src/a.py:2: two"  # links are never followed by grep
    bad = await confined.run("read_file", {"path": "src/a.py", "start_line": 9})
    assert not bad.ok and "has 3 lines" in bad.text
    assert not (await confined.run("rm", {"path": "src"})).ok
    assert not (await confined.run("search_code", {"query": "x"})).ok  # no index given
