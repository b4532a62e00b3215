"""`explore`: the rlm role's bounded recursive loop over one project.

What it owns: a loop in which the rlm model (default `deepseek/deepseek-v4-flash`) calls the
read-only project tools (`search_code`, `search_docs`, `read_file`, `list_dir`, `grep`, see
`tools.py`) through chat tool calls, and may put a sub-question to itself
(`ask_subquestion`), which runs the same loop one level deeper with a smaller budget. Four hard
limits bound it, each checked before any work it would pay for:

- depth: a sub-question deeper than `max_depth` is refused (the model is told, and goes on);
- steps: at most `max_steps` tool calls per loop (a sub-loop gets fewer);
- tokens: the model's reported usage, against `max_tokens` (a sub-loop gets a share);
- time: `max_seconds` on an injected `Clock`, one deadline for the whole exploration.

A loop stopped by a limit says which one ("stopped: step limit 8 reached") and returns what it
found so far with the full trace (each step: depth, tool, arguments, result summary). A stopped
sub-question becomes its parent's tool result, and the parent carries on.

Fallback mode: rlm defaults to local-only, which means it never calls the cloud whatever its
policy. The router already refuses cloud providers under it and `call_role` refuses them again
at the moment of the call; with no local LLM, `explore` fails at once with `ExploreUnavailable`
and no request leaves the machine.

It refuses to let a tool touch anything outside the project root (`ProjectTools`), to run a
tool the model invented, and to pass a cited range it cannot find in the project as a citation.

API:
    Limits(max_depth=2, max_steps=12, max_tokens=60000, max_seconds=180.0, sub_share=0.5)
    Explorer(router, tools, *, limits=Limits(), clock=SystemClock(), project=None)
    Explorer.for_project(fathom, router, project, *, reranker=None, limits=None, clock=None)
    await explorer.explore(question) -> Exploration
    await explore(fathom, router, question, project, **options) -> Exploration
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from fathom.agents.routes import call_role, local_only
from fathom.agents.tools import TOOL_SPECS, ProjectTools, Span, ToolOutcome, find_spans
from fathom.clock import Clock, SystemClock
from fathom.errors import ConfigError, NoProviderAvailable, whole_number
from fathom.inference.provider import ChatResult
from fathom.inference.router import NoRoute, Router
from fathom.roles import Role

if TYPE_CHECKING:  # pragma: no cover
    from fathom.service import Fathom

SUBQUESTION_SPEC: dict[str, Any] = {"type": "function", "function": {
    "name": "ask_subquestion",
    "description": "Delegate a focused sub-question to a fresh exploration with a smaller "
                   "budget; returns its answer with citations.",
    "parameters": {"type": "object", "properties": {"question": {"type": "string"}},
                   "required": ["question"], "additionalProperties": False},
}}

SYSTEM_PROMPT = (
    "You answer questions about one software project by exploring it with tools: search_code, "
    "search_docs, read_file (by line range), list_dir and grep, all over paths relative to the "
    "project root. You may delegate a focused sub-question with ask_subquestion. You are at "
    "depth {depth} of at most {max_depth}; you have at most {max_steps} tool calls and "
    "{max_tokens} tokens. When you know the answer, reply without tool calls and cite the "
    "evidence as path:start-end."
)


class ExploreUnavailable(NoProviderAvailable):
    """`explore` cannot run: no provider may serve the rlm role. Raised before any request;
    `reasons` are the router's, one line each."""

    def __init__(self, cause: NoRoute, local_only_mode: bool):
        self.reasons = list(cause.reasons)
        self.local_only = local_only_mode
        head = "explore cannot run: "
        if local_only_mode:
            head += ("role rlm is in fallback mode local-only, so it never calls the cloud "
                     "whatever its policy, and no local LLM can serve it. Start a sidecar that "
                     "serves rlm, or allow the cloud with `fathom policy set rlm --fallback any`. ")
        super().__init__(head + str(cause))


# The ceilings an explore request may ask for: a loop deeper or longer than these is a runaway.
MAX_DEPTH = 5
MAX_STEPS = 200
MAX_TOKENS = 2_000_000
MAX_SECONDS = 3600.0


@dataclass(frozen=True)
class Limits:
    max_depth: int = 2
    max_steps: int = 12
    max_tokens: int = 60_000
    max_seconds: float = 180.0
    sub_share: float = 0.5  # a sub-question gets this share of its parent's steps and tokens

    def __post_init__(self) -> None:
        whole_number("max_depth", self.max_depth, 0, MAX_DEPTH)
        whole_number("max_steps", self.max_steps, 1, MAX_STEPS)
        whole_number("max_tokens", self.max_tokens, 1, MAX_TOKENS)
        if not 0 < self.max_seconds <= MAX_SECONDS:
            raise ConfigError(f"max_seconds must be from 0 (excluded) to {MAX_SECONDS:g}, got {self.max_seconds!r}")
        if not 0 < self.sub_share <= 1:
            raise ConfigError(f"sub_share must be in (0, 1], got {self.sub_share}")

    def child(self, tokens_left: int) -> Limits:
        return replace(self,
                       max_steps=max(1, int(self.max_steps * self.sub_share)),
                       max_tokens=max(1, min(tokens_left, int(self.max_tokens * self.sub_share))))


@dataclass(frozen=True)
class TraceStep:
    depth: int
    step: int  # 1-based within its loop
    tool: str
    args: dict[str, Any]
    summary: str
    ok: bool = True


@dataclass(frozen=True)
class Exploration:
    question: str
    answer: str
    citations: list[Span]
    unverified: list[str]  # cited ranges not found in the project, with why
    trace: list[TraceStep]
    stopped: str | None = None  # "stopped: step limit 8 reached" when a limit ended it
    limits_hit: list[str] = field(default_factory=list)  # every limit met, sub-questions included
    tokens_used: int = 0
    sub_questions: int = 0
    providers: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.stopped is None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["citations"] = [str(s) for s in self.citations]
        d["complete"] = self.complete
        return d


class _LimitStop(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@dataclass
class _Run:
    deadline: float
    tokens_used: int = 0
    trace: list[TraceStep] = field(default_factory=list)
    limits_hit: list[str] = field(default_factory=list)
    sub_questions: int = 0
    providers: list[str] = field(default_factory=list)


@dataclass
class _End:
    answer: str
    stopped: str | None
    seen: list[Span]


class Explorer:
    def __init__(self, router: Router, tools: ProjectTools, *, limits: Limits | None = None,
                 clock: Clock | None = None, project: str | None = None):
        self.router = router
        self.tools = tools
        self.limits = limits or Limits()
        self.clock = clock or SystemClock()
        self.project = project

    @classmethod
    def for_project(cls, fathom: Fathom, router: Router, project: str, *, reranker: Any = None,
                    limits: Limits | None = None, clock: Clock | None = None) -> Explorer:
        """An explorer over an indexed project: its root from the project's records, its
        search tools through the search pipeline (and the reranker stage when given)."""
        from fathom.index import rerank

        record = fathom.records.get(project) if isinstance(project, str) else None
        if not record or not record.get("root"):
            raise ConfigError(f"no indexed project {project!r} with a known root folder: run "
                              f"`fathom index PATH --project {project}` first")

        async def search(query: str, table: str, k: int) -> list[Any]:
            return (await rerank.search(fathom, query, project, table, k, reranker=reranker)).hits

        return cls(router, ProjectTools(record["root"], search=search), limits=limits,
                   clock=clock, project=project)

    # -- the loop ----------------------------------------------------------------------

    async def explore(self, question: str) -> Exploration:
        if not isinstance(question, str) or not question.strip():
            raise ConfigError("the question is empty: ask something about the code")
        try:
            self.router.order(Role.RLM)  # fail before any request when nothing may serve
        except NoRoute as exc:
            raise ExploreUnavailable(exc, local_only(self.router, Role.RLM)) from exc
        run = _Run(deadline=self.clock.now() + self.limits.max_seconds)
        end = await self._loop(question, 0, self.limits, run)
        cited = find_spans(end.answer)
        checks = await asyncio.to_thread(lambda: [(s, self.tools.check_span(s)) for s in cited])
        citations = [s for s, why in checks if why is None]
        unverified = [f"{s}: {why}" for s, why in checks if why is not None]
        answer = end.answer
        if end.stopped:
            read = ", ".join(dict.fromkeys(str(s) for s in end.seen)) or "nothing yet"
            answer = f"{end.stopped}. " + (f"Partial answer: {end.answer} " if end.answer else "") \
                + f"Evidence seen so far: {read}."
        return Exploration(question, answer, citations, unverified, run.trace, end.stopped,
                           run.limits_hit, run.tokens_used, run.sub_questions,
                           list(dict.fromkeys(run.providers)))

    def _specs(self) -> list[dict[str, Any]]:
        return [*TOOL_SPECS, SUBQUESTION_SPEC]

    async def _loop(self, question: str, depth: int, limits: Limits, run: _Run) -> _End:
        token_cap = run.tokens_used + limits.max_tokens
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM_PROMPT.format(
                depth=depth, max_depth=limits.max_depth, max_steps=limits.max_steps,
                max_tokens=limits.max_tokens)},
            {"role": "user", "content": question},
        ]
        steps = 0
        seen: list[Span] = []
        said = ""  # what the model wrote beside its tool calls: the partial answer if stopped
        try:
            while True:
                self._check_time(run)
                if run.tokens_used >= token_cap:
                    raise _LimitStop(f"stopped: token limit {limits.max_tokens} reached "
                                     f"(used {run.tokens_used - token_cap + limits.max_tokens})")
                result = await self._chat(messages, min(4096, token_cap - run.tokens_used), run)
                run.tokens_used += _tokens(result, messages)
                if not result.tool_calls:
                    return _End(result.content or "", None, seen)
                said = result.content or said
                if run.tokens_used >= token_cap:
                    raise _LimitStop(f"stopped: token limit {limits.max_tokens} reached "
                                     f"(used {run.tokens_used - token_cap + limits.max_tokens})")
                messages.append(_assistant_message(result))
                for call in result.tool_calls:
                    if steps >= limits.max_steps:
                        raise _LimitStop(f"stopped: step limit {limits.max_steps} reached")
                    self._check_time(run)
                    steps += 1
                    outcome = await self._tool(call.name, call.arguments, depth, limits, run,
                                               token_cap - run.tokens_used)
                    seen.extend(outcome.spans)
                    run.trace.append(TraceStep(depth, steps, call.name, dict(call.arguments),
                                               outcome.summary, outcome.ok))
                    messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name,
                                     "content": outcome.text})
        except _LimitStop as stop:
            run.limits_hit.append(stop.message if depth == 0 else f"{stop.message} (depth {depth})")
            return _End(said, stop.message, seen)

    def _check_time(self, run: _Run) -> None:
        # One deadline for the whole exploration: a sub-question spends its parent's time.
        if self.clock.now() >= run.deadline:
            raise _LimitStop(f"stopped: time limit {self.limits.max_seconds:g}s reached")

    async def _chat(self, messages: list[dict[str, Any]], max_tokens: int, run: _Run) -> ChatResult:
        served = await call_role(
            self.router, Role.RLM,
            lambda p: p.chat(list(messages), tools=self._specs(), max_tokens=max(1, max_tokens)),
            project=self.project,
        )
        run.providers.append(served.provider.id)
        return served.value

    async def _tool(self, name: str, args: dict[str, Any], depth: int, limits: Limits,
                    run: _Run, tokens_left: int) -> ToolOutcome:
        if name != "ask_subquestion":
            return await self.tools.run(name, args)
        sub = args.get("question") if isinstance(args, dict) else None
        if not isinstance(sub, str) or not sub.strip():
            return ToolOutcome("error: ask_subquestion needs a non-empty 'question'",
                               "ask_subquestion without a question", ok=False)
        if depth + 1 > limits.max_depth:
            msg = f"stopped: depth limit {limits.max_depth} reached"
            run.limits_hit.append(f"{msg} (sub-question {sub[:80]!r} not explored)")
            return ToolOutcome(f"{msg}; this sub-question was not explored. Answer it yourself "
                               f"with the other tools.", msg, ok=False)
        run.sub_questions += 1
        child = limits.child(max(1, tokens_left))
        end = await self._loop(sub, depth + 1, child, run)
        spans = tuple(find_spans(end.answer)) or tuple(end.seen)
        if end.stopped:
            text = (f"sub-question {end.stopped} at depth {depth + 1}. Partial answer: "
                    f"{end.answer or 'none'}. Evidence seen: "
                    + (", ".join(dict.fromkeys(str(s) for s in end.seen)) or "none"))
            return ToolOutcome(text, f"sub-question (depth {depth + 1}) {end.stopped}", ok=False,
                               spans=tuple(end.seen))
        return ToolOutcome(end.answer, f"sub-question answered at depth {depth + 1}: "
                           f"{end.answer[:120]}", spans=spans)


def _assistant_message(result: ChatResult) -> dict[str, Any]:
    return {"role": "assistant", "content": result.content or "", "tool_calls": [
        {"id": c.id, "type": "function",
         "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
        for c in result.tool_calls]}


def _tokens(result: ChatResult, messages: list[dict[str, Any]]) -> int:
    usage = result.usage or {}
    if usage.get("total_tokens"):
        return int(usage["total_tokens"])
    if usage.get("prompt_tokens") or usage.get("completion_tokens"):
        return int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
    # No usage reported (some local servers): about four characters a token, so the limit
    # still binds.
    sent = sum(len(str(m.get("content") or "")) for m in messages)
    return (sent + len(result.content or "")) // 4 + 1


async def explore(fathom: Fathom, router: Router, question: str, project: str, *,
                  reranker: Any = None, limits: Limits | None = None,
                  clock: Clock | None = None) -> Exploration:
    explorer = Explorer.for_project(fathom, router, project, reranker=reranker, limits=limits,
                                    clock=clock)
    return await explorer.explore(question)
