"""The scripted local server's HTTP surface: what Ollama, vLLM, llama.cpp's server or TEI
answer on a GPU host, played from a script, plus a JSON control API under /control.

- `GET /v1/models`: the served model names.
- `POST /v1/chat/completions`: OpenAI chat completions, streamed (server-sent events, tool-call
  arguments in fragments, usage last when `stream_options.include_usage` asks) or not. The
  answers are the scripted turns (`fathom.devtools.emulator.chat`, the emulator's scripts).
- `POST /v1/rerank` (vLLM / llama.cpp shape) and `POST /rerank` + `GET /info` (TEI shape):
  deterministic word-overlap scores; `rerank=False` leaves them out, as a chat-only server does.

It is strict where those servers are: a model it does not serve is a 404 ("The model `x` does
not exist."); a prompt plus `max_tokens` beyond its context is a 400 in vLLM's words; a `tool`
message that answers no earlier tool call, or an assistant tool call whose arguments are not a
JSON string, is a 400; a scripted tool call for a request that offered no `tools` is a 400 (a
client that dropped the tools on the way must not pass). Faults (any status, once or a number
of times), a delay before answering and the context window are set through /control; every
request is recorded for tests to read back.

It refuses to be a product: it binds to 127.0.0.1 only and its control API has no auth.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from fathom.devtools.control_api import add_control_routes, body_of
from fathom.devtools.emulator.chat import ScriptedChat, Turn, content_pieces, tool_call_fragments

ROLES = ("system", "user", "assistant", "tool")


@dataclass
class LocalServerConfig:
    models: tuple[str, ...] = ("local-llm",)
    context: int = 8192  # tokens, estimated at four characters each
    rerank: bool = True


@dataclass
class Fault:
    status: int
    message: str
    kind: str
    left: int | None  # None: every request
    endpoints: tuple[str, ...]


@dataclass
class LocalServerState:
    config: LocalServerConfig
    chat: ScriptedChat = field(default_factory=ScriptedChat)
    faults: list[Fault] = field(default_factory=list)
    delay: float = 0.0
    context: int = 0  # tokens; the config's unless /control/context changed it
    requests: Counter[str] = field(default_factory=Counter)  # answered or refused, by endpoint
    refused: Counter[int] = field(default_factory=Counter)  # by HTTP status
    streamed: int = 0
    log: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=200))
    # Set by a reset: a request held by the delay when the server is reset belongs to the test
    # before it; it is released at once and must not take a turn from the script loaded since.
    was_reset: asyncio.Event = field(default_factory=asyncio.Event)

    def reset(self) -> None:
        self.was_reset.set()
        self.was_reset = asyncio.Event()
        self.chat.reset()
        self.faults.clear()
        self.delay = 0.0
        self.context = self.config.context
        self.requests.clear()
        self.refused.clear()
        self.streamed = 0
        self.log.clear()

    def counters(self) -> dict[str, Any]:
        return {
            "requests": dict(self.requests),
            "refused": {str(k): v for k, v in self.refused.items()},
            "streamed": self.streamed,
            "turns_left": len(self.chat.turns),
        }

    def fault_for(self, endpoint: str) -> Fault | None:
        for fault in self.faults:
            if fault.endpoints and endpoint not in fault.endpoints:
                continue
            if fault.left is not None:
                fault.left -= 1
                if fault.left <= 0:
                    self.faults.remove(fault)
            return fault
        return None


class _Refusal(Exception):
    def __init__(self, status: int, message: str, kind: str):
        self.status, self.message, self.kind = status, message, kind


def _error(refusal: _Refusal) -> JSONResponse:
    # vLLM's error body (OpenAI's `error` object beside its own top-level fields).
    return JSONResponse(
        {
            "object": "error",
            "message": refusal.message,
            "type": refusal.kind,
            "param": None,
            "code": refusal.status,
            "error": {"message": refusal.message, "type": refusal.kind, "code": refusal.status},
        },
        status_code=refusal.status,
    )


def _tokens(text: str) -> int:
    return len(text) // 4 + 1


def prompt_tokens(messages: list[dict[str, Any]], tools: list[Any] | None) -> int:
    """An estimate of the prompt's size, as a tokenizer would roughly count it."""
    total = 0
    for m in messages:
        total += _tokens(str(m.get("content") or ""))
        for call in m.get("tool_calls") or []:
            total += _tokens(json.dumps(call))
    return total + (_tokens(json.dumps(tools)) if tools else 0)


def check_messages(messages: Any) -> list[dict[str, Any]]:
    """The message rules real servers enforce (and chat templates depend on)."""
    if not isinstance(messages, list) or not messages:
        raise _Refusal(400, "messages must be a non-empty list", "BadRequestError")
    open_calls: set[str] = set()
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise _Refusal(400, f"messages[{i}]: role must be one of {', '.join(ROLES)}", "BadRequestError")
        if m["role"] == "assistant":
            for call in m.get("tool_calls") or []:
                args = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
                try:
                    if not isinstance(args, str) or not isinstance(json.loads(args), dict):
                        raise ValueError
                except ValueError:
                    raise _Refusal(
                        400,
                        f"messages[{i}]: tool call arguments must be a JSON object in a string",
                        "BadRequestError",
                    ) from None
                open_calls.add(str(call.get("id")))
        if m["role"] == "tool" and m.get("tool_call_id") not in open_calls:
            raise _Refusal(
                400,
                f"messages[{i}]: a 'tool' message must answer a preceding assistant "
                f"tool call (tool_call_id {m.get('tool_call_id')!r} is unknown)",
                "BadRequestError",
            )
    return messages


def overlap(query: str, document: str) -> float:
    """Deterministic relevance: the share of the query's words found in the document."""
    q = set(query.lower().split())
    return len(q & set(document.lower().split())) / len(q) if q else 0.0


Answer = Callable[[dict[str, Any]], Awaitable[Response]]


class LocalServerApi:
    """The endpoints, each a method over one config and one state; `router()` mounts them."""

    def __init__(self, config: LocalServerConfig, state: LocalServerState):
        self.config, self.state = config, state

    def router(self) -> APIRouter:
        r = APIRouter()
        r.add_api_route("/v1/models", self.models, methods=["GET"])
        r.add_api_route("/v1/chat/completions", self.chat, methods=["POST"])
        if self.config.rerank:
            r.add_api_route("/v1/rerank", self.rerank, methods=["POST"])
            r.add_api_route("/rerank", self.tei_rerank, methods=["POST"])
            r.add_api_route("/info", self.info, methods=["GET"])
        return r

    def control_router(self) -> APIRouter:
        r = APIRouter(prefix="/control")
        r.add_api_route("/requests", self.control_requests, methods=["GET"])
        r.add_api_route("/fail", self.control_fail, methods=["POST"])
        r.add_api_route("/context", self.control_context, methods=["PUT"])
        r.add_api_route("/delay", self.control_delay, methods=["PUT"])
        return r

    async def served(self, endpoint: str, request: Request, handler: Answer) -> Response:
        state = self.state
        state.requests[endpoint] += 1
        try:
            raw = await request.body()
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                raise _Refusal(400, "the body is not JSON", "BadRequestError") from None
            if not isinstance(body, dict):
                raise _Refusal(400, "the body must be a JSON object", "BadRequestError")
            state.log.append(
                {
                    "endpoint": endpoint,
                    **{
                        k: body.get(k)
                        for k in (
                            "model",
                            "messages",
                            "tools",
                            "stream",
                            "max_tokens",
                            "query",
                            "documents",
                            "texts",
                        )
                    },
                }
            )
            if state.delay:
                reset = state.was_reset
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(reset.wait(), state.delay)
                if reset.is_set():
                    raise _Refusal(
                        503, "the server was reset while this request waited", "ServiceUnavailable"
                    )
            fault = state.fault_for(endpoint)
            if fault is not None:
                raise _Refusal(fault.status, fault.message, fault.kind)
            return await handler(body)
        except _Refusal as refusal:
            state.refused[refusal.status] += 1
            return _error(refusal)

    def model_of(self, body: dict[str, Any]) -> str:
        model = body.get("model")
        if not isinstance(model, str) or model not in self.config.models:
            raise _Refusal(404, f"The model `{model}` does not exist.", "NotFoundError")
        return model

    async def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": m, "object": "model", "owned_by": "fathom-devtools"} for m in self.config.models],
        }

    # ------------------------------------------------------------------ chat

    async def chat(self, request: Request) -> Response:
        return await self.served("chat", request, self._chat)

    async def _chat(self, body: dict[str, Any]) -> Response:
        state = self.state
        model = self.model_of(body)
        messages = check_messages(body.get("messages"))
        tools = body.get("tools") or None
        asked = prompt_tokens(messages, tools)
        completion_cap = int(body.get("max_tokens") or 0)
        if asked + completion_cap > state.context:
            raise _Refusal(
                400,
                f"This model's maximum context length is {state.context} tokens. "
                f"However, you requested {asked + completion_cap} tokens ({asked} in the "
                f"messages, {completion_cap} in the completion). Please reduce the "
                f"length of the messages or completion.",
                "BadRequestError",
            )
        turn = state.chat.next_turn(model, messages)
        calls = state.chat.tool_call_objects(turn)
        if calls and not tools:
            raise _Refusal(
                400,
                "the script answers with a tool call, but the request offered no tools",
                "BadRequestError",
            )
        finish = turn.finish_reason or ("tool_calls" if calls else "stop")
        out_tokens = _tokens(turn.content or "") + sum(_tokens(c["function"]["arguments"]) for c in calls)
        usage = {"prompt_tokens": asked, "completion_tokens": out_tokens, "total_tokens": asked + out_tokens}
        head = {"id": f"chatcmpl-{uuid.uuid4().hex[:16]}", "created": int(time.time()), "model": model}
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": turn.content}
            if calls:
                message["tool_calls"] = calls
            return JSONResponse(
                {
                    **head,
                    "object": "chat.completion",
                    "usage": usage,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                }
            )
        state.streamed += 1
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(
            stream(head, turn, calls, finish, usage if with_usage else None), media_type="text/event-stream"
        )

    # ------------------------------------------------------------------ rerank

    async def rerank(self, request: Request) -> Response:
        return await self.served("rerank", request, self._rerank)

    async def _rerank(self, body: dict[str, Any]) -> Response:
        model = self.model_of(body)
        order = ranked(body.get("query"), body.get("documents"))
        top = body.get("top_n")
        if isinstance(top, int):
            order = order[:top]
        return JSONResponse(
            {
                "id": f"rerank-{uuid.uuid4().hex[:12]}",
                "model": model,
                "results": [{"index": i, "relevance_score": s} for i, s in order],
                "usage": {"total_tokens": _tokens(json.dumps(body))},
            }
        )

    async def tei_rerank(self, request: Request) -> Response:
        async def answer(body: dict[str, Any]) -> Response:
            return JSONResponse(
                [{"index": i, "score": s} for i, s in ranked(body.get("query"), body.get("texts"))]
            )

        return await self.served("tei-rerank", request, answer)

    async def info(self) -> dict[str, Any]:
        return {"model_id": self.config.models[0], "model_type": {"reranker": {"id2label": {"0": "LABEL_0"}}}}

    # ------------------------------------------------------------------ control API

    async def control_requests(self) -> dict[str, Any]:
        return {"requests": list(self.state.log)}

    async def control_fail(self, request: Request) -> Any:
        b = await body_of(request)
        count = b.get("count", 1)
        self.state.faults.append(
            Fault(
                int(b.get("status", 500)),
                str(b.get("message", "Internal Server Error")),
                str(b.get("type", "InternalServerError")),
                None if count is None else int(count),
                tuple(b.get("endpoints") or ()),
            )
        )
        return {"faults": len(self.state.faults)}

    async def control_context(self, request: Request) -> Any:
        self.state.context = max(1, int((await body_of(request)).get("tokens", self.config.context)))
        return {"context": self.state.context}

    async def control_delay(self, request: Request) -> Any:
        self.state.delay = max(0.0, float((await body_of(request)).get("seconds", 0.0)))
        return {"delay": self.state.delay}


async def stream(
    head: dict[str, Any], turn: Turn, calls: list[dict[str, Any]], finish: str, usage: dict[str, int] | None
) -> AsyncIterator[str]:
    def event(choices: list[dict[str, Any]], **extra: Any) -> str:
        return f"data: {json.dumps({**head, 'object': 'chat.completion.chunk', 'choices': choices, **extra})}\n\n"

    def delta(d: dict[str, Any], finish_reason: str | None = None) -> str:
        return event([{"index": 0, "delta": d, "finish_reason": finish_reason}])

    yield delta({"role": "assistant", "content": ""})
    err = turn.stream_error
    for n, piece in enumerate(content_pieces(turn.content)):
        if err is not None and n >= int(err.get("after_chunks", 0)):
            break
        yield delta({"content": piece})
    if err is not None:
        # vLLM ends a failed stream with one error event, then closes.
        error = {
            "message": err.get("message", "generation failed"),
            "type": err.get("type", "InternalServerError"),
            "code": int(err.get("code", 500)),
        }
        yield f"data: {json.dumps({'error': error})}\n\n"
        return
    for d in tool_call_fragments(calls):
        yield delta(d)
    yield delta({}, finish)
    if usage is not None:
        yield event([], usage=usage)
    yield "data: [DONE]\n\n"


def ranked(query: Any, documents: Any) -> list[tuple[int, float]]:
    if not isinstance(query, str) or not isinstance(documents, list):
        raise _Refusal(400, "query (a string) and documents (a list) are required", "BadRequestError")
    texts = [d.get("text", "") if isinstance(d, dict) else str(d) for d in documents]
    scores = [overlap(query, t) for t in texts]
    return sorted(enumerate(scores), key=lambda pair: (-pair[1], pair[0]))


def create_app(config: LocalServerConfig | None = None) -> FastAPI:
    config = config or LocalServerConfig()
    state = LocalServerState(config, context=config.context)
    app = FastAPI(
        title="fathom scripted local server (dev/test only)", docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.local = state
    api = LocalServerApi(config, state)
    app.include_router(api.router())
    add_control_routes(app, state)  # reset, counters, chat script
    app.include_router(api.control_router())
    return app
