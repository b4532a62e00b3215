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
sub-question becomes its parent's tool result, and the parent carries on. The deadline also
bounds each model call and tool in flight, so a hung local model cannot hold the loop past it;
a model that fails once the loop has gathered evidence (its context full, its server gone)
stops it the same way, with what was found so far.

Small local models often get tool calls wrong. A call whose arguments are not a JSON object, a
call written into the reply as text instead of made through tool calling, and a call to a tool
that does not exist each get a corrective message back to the model instead of ending the run,
up to `max_corrections` per loop; one more stops the loop ("stopped: correction limit 3
reached …"). `on_step` hears every step (corrections included) as it happens, so a front end
can show the loop live.

Fallback mode: rlm defaults to local-only, which means it never calls the cloud whatever its
policy. The router already refuses cloud providers under it and `call_role` refuses them again
at the moment of the call; with no local LLM, `explore` fails at once with `ExploreUnavailable`
and no request leaves the machine.

It refuses to let a tool touch anything outside the project root (`ProjectTools`), to run a
tool the model invented, and to pass a cited range it cannot find in the project as a citation.

API:
    Limits(max_depth=2, max_steps=12, max_tokens=60000, max_seconds=180.0, sub_share=0.5,
           max_corrections=3)
    Explorer(router, tools, *, limits=Limits(), clock=SystemClock(), project=None, on_step=None)
    Explorer.for_project(fathom, router, project, *, reranker=None, limits=None, clock=None,
                         on_step=None)
    await explorer.explore(question) -> Exploration
    await explore(fathom, router, question, project, **options) -> Exploration
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Awaitable, Callable, Collection
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from fathom.agents.routes import local_reranker
from fathom.agents.tools import TOOL_SPECS, ProjectTools, Span, ToolOutcome, find_spans
from fathom.clock import Clock, SystemClock
from fathom.errors import ConfigError, NoProviderAvailable, whole_number
from fathom.index.walker import resolve_roots, root_moved
from fathom.inference.openrouter import ContextLengthExceeded
from fathom.inference.provider import ChatResult, ToolCall
from fathom.inference.router import NoRoute, Router, call_role, local_only
from fathom.roles import Role

if TYPE_CHECKING:  # pragma: no cover
    from fathom.service import Fathom

SUBQUESTION_SPEC: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "ask_subquestion",
        "description": "Delegate a focused sub-question to a fresh exploration with a smaller "
        "budget; returns its answer with citations.",
        "parameters": {
            "type": "object",
            "properties": {"question": {"type": "string"}},
            "required": ["question"],
            "additionalProperties": False,
        },
    },
}

SYSTEM_PROMPT = (
    "You answer questions about one software project by exploring it with tools: search_code, "
    "search_docs, read_file (by line range), list_dir and grep, all over paths relative to the "
    "project root. You may delegate a focused sub-question with ask_subquestion. You are at "
    "depth {depth} of at most {max_depth}; you have at most {max_steps} tool calls and "
    "{max_tokens} tokens. When you know the answer, reply without tool calls and cite the "
    "evidence as path:start-end."
)

# What the model reads when a tool call of its own cannot run: what was wrong, and what to do.
WRITTEN_CALL = (
    "Your last reply wrote a call to {name} as text, so nothing ran. Tools run only when you call "
    "them through tool calling (a tool call whose arguments are one JSON object), never when the "
    "call is written in the reply. Call the tool that way, or answer in plain words and cite the "
    "evidence as path:start-end."
)
ALL_TOOLS = frozenset(spec["function"]["name"] for spec in TOOL_SPECS) | {"ask_subquestion"}
T = TypeVar("T")


class ExploreUnavailable(NoProviderAvailable):
    """`explore` cannot run: no provider may serve the rlm role. Raised before any request;
    `reasons` are the router's, one line each."""

    def __init__(self, cause: NoRoute, local_only_mode: bool):
        self.reasons = list(cause.reasons)
        self.local_only = local_only_mode
        head = "explore cannot run: "
        if local_only_mode:
            head += (
                "role rlm is in fallback mode local-only, so it never calls the cloud "
                "whatever its policy, and no local LLM can serve it. Serve rlm from a local "
                "LLM (see below), or allow the cloud with `fathom policy set rlm --fallback "
                "any`. "
            )
        super().__init__(head + str(cause))


# The ceilings an explore request may ask for: a loop deeper or longer than these is a runaway.
MAX_DEPTH = 5
MAX_STEPS = 200
MAX_TOKENS = 2_000_000
MAX_SECONDS = 3600.0
MAX_CORRECTIONS = 20


@dataclass(frozen=True)
class Limits:
    max_depth: int = 2
    max_steps: int = 12
    max_tokens: int = 60_000
    max_seconds: float = 180.0
    sub_share: float = 0.5  # a sub-question gets this share of its parent's steps and tokens
    max_corrections: int = 3  # corrective messages per loop for tool calls that cannot run

    def __post_init__(self) -> None:
        whole_number("max_depth", self.max_depth, 0, MAX_DEPTH)
        whole_number("max_steps", self.max_steps, 1, MAX_STEPS)
        whole_number("max_tokens", self.max_tokens, 1, MAX_TOKENS)
        whole_number("max_corrections", self.max_corrections, 0, MAX_CORRECTIONS)
        if not 0 < self.max_seconds <= MAX_SECONDS:
            raise ConfigError(
                f"max_seconds must be from 0 (excluded) to {MAX_SECONDS:g}, got {self.max_seconds!r}"
            )
        if not 0 < self.sub_share <= 1:
            raise ConfigError(f"sub_share must be in (0, 1], got {self.sub_share}")

    def child(self, tokens_left: int) -> Limits:
        return replace(
            self,
            max_steps=max(1, int(self.max_steps * self.sub_share)),
            max_tokens=max(1, min(tokens_left, int(self.max_tokens * self.sub_share))),
        )


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
    def __init__(
        self,
        router: Router,
        tools: ProjectTools,
        *,
        limits: Limits | None = None,
        clock: Clock | None = None,
        project: str | None = None,
        on_step: Callable[[TraceStep], None] | None = None,
    ):
        self.router = router
        self.tools = tools
        self.limits = limits or Limits()
        self.clock = clock or SystemClock()
        self.project = project
        self.on_step = on_step

    @classmethod
    def for_project(
        cls,
        fathom: Fathom,
        router: Router,
        project: str,
        *,
        reranker: Any = None,
        limits: Limits | None = None,
        clock: Clock | None = None,
        on_step: Callable[[TraceStep], None] | None = None,
    ) -> Explorer:
        """An explorer over an indexed project: its root from the project's records, its
        search tools through the search pipeline (and the reranker stage when given)."""
        from fathom.index.request import SearchRequest

        record = fathom.records.get(project) if isinstance(project, str) else None
        if not record or not record.get("root"):
            raise ConfigError(
                f"no indexed project {project!r} with a known root folder: run "
                f"`fathom index PATH --project {project}` first"
            )

        async def search(query: str, table: str, k: int) -> list[Any]:
            ranker = reranker
            if isinstance(reranker, Router) and local_only(router, Role.RLM):
                # A local-only exploration sends no code to the cloud, its searches included.
                ranker = local_reranker(reranker)
            return (
                await fathom.searches.ranking(SearchRequest(query, project, table, k), reranker=ranker)
            ).hits

        root = Path(record["root"])
        # The tools read the folder the project was indexed from, or nothing: a folder since
        # replaced by a link to elsewhere is not read under the project's name.
        problem = root_moved(root, resolve_roots(fathom.settings.index_root_list()))
        if problem is not None:
            raise ConfigError(
                f"cannot explore {project!r}: {problem}; put the project folder "
                f"back, or index the new place (`fathom index PATH --project "
                f"{project}`)"
            )
        tools = ProjectTools(root, search=search, **fathom.selection_of(project, root))
        return cls(router, tools, limits=limits, clock=clock, project=project, on_step=on_step)

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
            answer = (
                f"{end.stopped}. "
                + (f"Partial answer: {end.answer} " if end.answer else "")
                + f"Evidence seen so far: {read}."
            )
        return Exploration(
            question,
            answer,
            citations,
            unverified,
            run.trace,
            end.stopped,
            run.limits_hit,
            run.tokens_used,
            run.sub_questions,
            list(dict.fromkeys(run.providers)),
        )

    def _specs(self) -> list[dict[str, Any]]:
        return [*TOOL_SPECS, SUBQUESTION_SPEC]

    async def _loop(self, question: str, depth: int, limits: Limits, run: _Run) -> _End:
        token_cap = run.tokens_used + limits.max_tokens
        messages: list[dict[str, Any]] = [
            {
                "role": "system",
                "content": SYSTEM_PROMPT.format(
                    depth=depth,
                    max_depth=limits.max_depth,
                    max_steps=limits.max_steps,
                    max_tokens=limits.max_tokens,
                ),
            },
            {"role": "user", "content": question},
        ]
        steps = 0
        corrections = 0
        seen: list[Span] = []
        said = ""  # what the model wrote beside its tool calls: the partial answer if stopped

        def correct(tool: str, args: dict[str, Any], problem: str) -> None:
            # A tool call that cannot run is the model's mistake: it is told (the caller sends
            # the message) and tries again, a bounded number of times.
            nonlocal corrections
            if corrections >= limits.max_corrections:
                self._record(
                    run, TraceStep(depth, steps + 1, tool, args, f"not corrected: {problem}", ok=False)
                )
                raise _LimitStop(
                    f"stopped: correction limit {limits.max_corrections} reached: the model "
                    f"kept making tool calls that cannot run (last: {problem})"
                )
            corrections += 1
            self._record(
                run,
                TraceStep(
                    depth,
                    steps + 1,
                    tool,
                    args,
                    f"corrected ({corrections} of {limits.max_corrections}): {problem}",
                    ok=False,
                ),
            )

        try:
            while True:
                left = self._check_time(run)
                if run.tokens_used >= token_cap:
                    raise _LimitStop(
                        f"stopped: token limit {limits.max_tokens} reached "
                        f"(used {run.tokens_used - token_cap + limits.max_tokens})"
                    )
                result = await self._chat(messages, min(4096, token_cap - run.tokens_used), run, left)
                run.tokens_used += _tokens(result, messages)
                if not result.tool_calls:
                    written = written_tool_call(result.content, ALL_TOOLS)
                    if written is None:
                        return _End(result.content or "", None, seen)
                    correct(
                        written[0], written[1], "a tool call written as text, not made through tool calling"
                    )
                    messages += [
                        {"role": "assistant", "content": result.content or ""},
                        {"role": "user", "content": WRITTEN_CALL.format(name=written[0])},
                    ]
                    continue
                said = result.content or said
                if run.tokens_used >= token_cap:
                    raise _LimitStop(
                        f"stopped: token limit {limits.max_tokens} reached "
                        f"(used {run.tokens_used - token_cap + limits.max_tokens})"
                    )
                messages.append(_assistant_message(result))
                for call in result.tool_calls:
                    if steps >= limits.max_steps:
                        raise _LimitStop(f"stopped: step limit {limits.max_steps} reached")
                    left = self._check_time(run)
                    problem = _unrunnable(call)
                    if problem is not None:
                        correct(call.name or "(no name)", dict(call.arguments), problem)
                        # Every tool call gets its answer, or the next request is malformed.
                        messages.append(
                            {
                                "role": "tool",
                                "tool_call_id": call.id,
                                "name": call.name,
                                "content": f"error: {problem}",
                            }
                        )
                        continue
                    steps += 1
                    outcome = await self._tool(
                        call.name, call.arguments, depth, limits, run, token_cap - run.tokens_used, left
                    )
                    seen.extend(outcome.spans)
                    self._record(
                        run,
                        TraceStep(depth, steps, call.name, dict(call.arguments), outcome.summary, outcome.ok),
                    )
                    messages.append(
                        {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": outcome.text}
                    )
        except _LimitStop as stop:
            run.limits_hit.append(stop.message if depth == 0 else f"{stop.message} (depth {depth})")
            return _End(said, stop.message, seen)

    def _record(self, run: _Run, step: TraceStep) -> None:
        run.trace.append(step)
        if self.on_step is not None:
            self.on_step(step)

    def _check_time(self, run: _Run) -> float:
        """The seconds left before the deadline, or the time limit's stop. One deadline for the
        whole exploration: a sub-question spends its parent's time."""
        left = run.deadline - self.clock.now()
        if left <= 0:
            raise _LimitStop(f"stopped: time limit {self.limits.max_seconds:g}s reached")
        return left

    async def _within(self, left: float, work: Awaitable[T]) -> T:
        """`work`, unless the deadline passes first: then it is cancelled and the loop stops on
        the time limit (a hung model or server must not hold the loop past it)."""
        task = asyncio.ensure_future(work)
        timer = asyncio.ensure_future(self.clock.sleep(left))
        try:
            await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if task.cancelled():
            raise _LimitStop(f"stopped: time limit {self.limits.max_seconds:g}s reached")
        return task.result()

    async def _chat(
        self, messages: list[dict[str, Any]], max_tokens: int, run: _Run, left: float
    ) -> ChatResult:
        try:
            served = await self._within(
                left,
                call_role(
                    self.router,
                    Role.RLM,
                    lambda p: p.chat(list(messages), tools=self._specs(), max_tokens=max(1, max_tokens)),
                    project=self.project,
                ),
            )
        except NoProviderAvailable as exc:
            if not run.trace:
                raise  # nothing gathered yet: the refusal itself is the answer
            raise _LimitStop(_model_stop(exc)) from exc
        run.providers.append(served.provider.id)
        return served.value

    async def _tool(
        self,
        name: str,
        args: dict[str, Any],
        depth: int,
        limits: Limits,
        run: _Run,
        tokens_left: int,
        left: float,
    ) -> ToolOutcome:
        if name != "ask_subquestion":
            return await self._within(left, self.tools.run(name, args))
        sub = args.get("question") if isinstance(args, dict) else None
        if not isinstance(sub, str) or not sub.strip():
            return ToolOutcome(
                "error: ask_subquestion needs a non-empty 'question'",
                "ask_subquestion without a question",
                ok=False,
            )
        if depth + 1 > limits.max_depth:
            msg = f"stopped: depth limit {limits.max_depth} reached"
            run.limits_hit.append(f"{msg} (sub-question {sub[:80]!r} not explored)")
            return ToolOutcome(
                f"{msg}; this sub-question was not explored. Answer it yourself with the other tools.",
                msg,
                ok=False,
            )
        run.sub_questions += 1
        child = limits.child(max(1, tokens_left))
        end = await self._loop(sub, depth + 1, child, run)
        spans = tuple(find_spans(end.answer)) or tuple(end.seen)
        if end.stopped:
            text = (
                f"sub-question {end.stopped} at depth {depth + 1}. Partial answer: "
                f"{end.answer or 'none'}. Evidence seen: "
                + (", ".join(dict.fromkeys(str(s) for s in end.seen)) or "none")
            )
            return ToolOutcome(
                text, f"sub-question (depth {depth + 1}) {end.stopped}", ok=False, spans=tuple(end.seen)
            )
        return ToolOutcome(
            end.answer, f"sub-question answered at depth {depth + 1}: {end.answer[:120]}", spans=spans
        )


def _unrunnable(call: ToolCall) -> str | None:
    """Why a tool call cannot run as the model made it, worded for the model; None if it can."""
    if call.problem:
        return (
            f"your call to {call.name or 'a tool'} cannot run: {call.problem}. Call it again "
            f"with its arguments as one JSON object that matches the tool's schema"
        )
    if call.name not in ALL_TOOLS:
        return (
            f"there is no tool named {call.name!r}; the tools are "
            f"{', '.join(sorted(ALL_TOOLS))}. Call one of them, or answer in plain words"
        )
    return None


_TAGS = re.compile(r"</?\s*(tool_call|tool_calls|function_call|functioncall)\s*>", re.IGNORECASE)
_FENCE = re.compile(r"^```[\w-]*\s*|\s*```$")
_PYTHONIC = re.compile(r"^\[?\s*([A-Za-z_]\w*)\s*\(")


def written_tool_call(text: str | None, names: Collection[str]) -> tuple[str, dict[str, Any]] | None:
    """The tool call a model wrote into its reply as text instead of making it, as (name,
    arguments); None for a reply that is an answer. Recognised: a JSON object naming a function
    with its arguments (bare, in a code fence, or between <tool_call> tags, as small models
    trained on other formats write it), or `tool_name(...)` for one of `names`."""
    if not text:
        return None
    body = _FENCE.sub("", _TAGS.sub("", text).strip()).strip()
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, list) and data:
        data = data[0]
    if isinstance(data, dict):
        fn = data["function"] if isinstance(data.get("function"), dict) else data
        name = fn.get("name")
        args = fn.get("arguments", fn.get("parameters"))
        if isinstance(name, str) and name and ("arguments" in fn or "parameters" in fn or name in names):
            return name, args if isinstance(args, dict) else {}
        return None
    match = _PYTHONIC.match(body)
    if match and match.group(1) in names:
        return match.group(1), {}
    return None


def _model_stop(exc: NoProviderAvailable) -> str:
    cause = exc.__cause__
    if isinstance(cause, ContextLengthExceeded):
        return (
            "stopped: context limit of the model reached (the conversation no longer fits; "
            "ask a narrower question or serve a model with a longer context)"
        )
    return f"stopped: the model failed ({exc})"


def _assistant_message(result: ChatResult) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": result.content or "",
        "tool_calls": [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in result.tool_calls
        ],
    }


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


async def explore(
    fathom: Fathom,
    router: Router,
    question: str,
    project: str,
    *,
    reranker: Any = None,
    limits: Limits | None = None,
    clock: Clock | None = None,
) -> Exploration:
    explorer = Explorer.for_project(fathom, router, project, reranker=reranker, limits=limits, clock=clock)
    return await explorer.explore(question)
