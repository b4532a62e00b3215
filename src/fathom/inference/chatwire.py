"""The OpenAI chat-completions wire format, read one way for every server that speaks it.

What it owns: turning a chat completion body, or the server-sent events of a streamed one,
into a `ChatResult` with its tool calls; and recognising, in an error's text, the refusals
every OpenAI-compatible server words its own way: the model is not served here, the request
does not fit the model's context, and a batch carries more than the server takes at once.
OpenRouter's client (`inference.openrouter`) and the local OpenAI-compatible servers a
sidecar or a single machine fronts (`fleet.backends`: vLLM, Ollama, llama.cpp's server, LM
Studio) share it, so a tool call means the same thing whoever served it.

A tool call the model got wrong (arguments that are not one JSON object, no function name) is
the model's mistake, not a failed request: it comes back as a `ToolCall` whose `problem` says
what is wrong, so the loop that asked can tell the model and let it correct itself. Ollama
sometimes sends arguments already parsed as an object; that is accepted as it is.

It refuses to know about HTTP, keys, retries or routing: callers turn `ChatWireError` into
their own typed error.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from fathom.inference.provider import ChatResult, ToolCall

# Hears each piece of a streamed answer's content as it arrives.
OnDelta = Callable[[str], Awaitable[None] | None]


class ChatWireError(ValueError):
    """A 200 body that is not a chat completion. `problem` names the rule, `got` what came."""

    def __init__(self, problem: str, expected: Any, got: Any):
        self.problem, self.expected, self.got = problem, expected, got
        super().__init__(f"{problem} (expected {expected!r}, got {got!r})")


def tool_call(call_id: str, name: Any, arguments: Any) -> ToolCall:
    """One tool call; a malformed one keeps its id and name and says what is wrong."""
    name = name if isinstance(name, str) else ""
    if not name:
        return ToolCall(call_id, "", {}, problem="the tool call names no function")
    if isinstance(arguments, dict):
        return ToolCall(call_id, name, arguments)
    text = arguments if isinstance(arguments, str) else ("" if arguments is None else None)
    if text is None:
        return ToolCall(
            call_id, name, {}, problem=f"its arguments are a {type(arguments).__name__}, not a JSON object"
        )
    try:
        parsed = json.loads(text) if text.strip() else {}
    except ValueError:
        return ToolCall(call_id, name, {}, problem=f"its arguments are not valid JSON: {text[:200]!r}")
    if not isinstance(parsed, dict):
        return ToolCall(
            call_id, name, {}, problem=f"its arguments are a JSON {type(parsed).__name__}, not an object"
        )
    return ToolCall(call_id, name, parsed)


def _usage(raw: Any) -> dict[str, int]:
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool)}


def parse_completion(data: Mapping[str, Any], model: str) -> ChatResult:
    """A non-streamed `chat.completion` body."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ChatWireError("chat completion has no choices", "choices[0]", choices)
    choice = choices[0]
    msg = choice.get("message") or {}
    calls = tuple(
        tool_call(
            tc.get("id") or f"call_{i}",
            (tc.get("function") or {}).get("name"),
            (tc.get("function") or {}).get("arguments"),
        )
        for i, tc in enumerate(msg.get("tool_calls") or [])
        if isinstance(tc, dict)
    )
    served = data.get("model")
    return ChatResult(
        content=msg.get("content"),
        tool_calls=calls,
        finish_reason=choice.get("finish_reason"),
        usage=_usage(data.get("usage")),
        model=served if isinstance(served, str) and served else model,
    )


async def sse_payloads(lines: AsyncIterable[str]) -> AsyncIterator[str]:
    """The data payloads of a server-sent-events stream, up to `[DONE]`. Blank lines, comments
    (": OPENROUTER PROCESSING" keeps a connection alive) and other fields are skipped."""
    async for line in lines:
        payload = line[5:].strip() if line.startswith("data:") else ""
        if not payload:
            continue
        if payload == "[DONE]":
            return
        yield payload


class ChatStream:
    """Assembles a streamed chat completion from its chunks: content pieces, tool-call
    fragments by index (a call's name and arguments arrive in pieces), the finish reason and
    the usage (sent in the last chunk, when the server sends it at all)."""

    def __init__(self, model: str):
        self.model = model
        self.served_model: str | None = None
        self.pieces: list[str] = []
        self.finish: str | None = None
        self.usage: dict[str, int] = {}
        self._calls: dict[int, dict[str, Any]] = {}

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def feed(self, chunk: Mapping[str, Any]) -> str:
        """Take one parsed chunk; returns the content it added ("" when none)."""
        if isinstance(chunk.get("model"), str):
            self.served_model = chunk["model"]
        if chunk.get("usage"):
            self.usage = _usage(chunk["usage"])
        added = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            piece = delta.get("content")
            if isinstance(piece, str) and piece:
                added.append(piece)
            for tc in delta.get("tool_calls") or []:
                slot = self._calls.setdefault(
                    int(tc.get("index", 0)), {"id": None, "name": "", "arguments": ""}
                )
                slot["id"] = tc.get("id") or slot["id"]
                fn = tc.get("function") or {}
                slot["name"] += fn.get("name") or ""
                args = fn.get("arguments")
                if isinstance(args, str):
                    slot["arguments"] = (
                        slot["arguments"] if isinstance(slot["arguments"], str) else ""
                    ) + args
                elif args is not None:  # an object sent whole, as Ollama may
                    slot["arguments"] = args
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
        self.pieces += added
        return "".join(added)

    async def take(self, chunk: Mapping[str, Any], on_delta: OnDelta | None) -> None:
        """`feed`, then hand the new content to `on_delta` (sync or async) when there is some."""
        piece = self.feed(chunk)
        if piece and on_delta is not None:
            maybe = on_delta(piece)
            if maybe is not None:
                await maybe

    def result(self) -> ChatResult:
        calls = tuple(
            tool_call(c["id"] or f"call_{i}", c["name"], c["arguments"])
            for i, c in sorted(self._calls.items())
        )
        return ChatResult(
            content=self.text or None,
            tool_calls=calls,
            finish_reason=self.finish,
            usage=self.usage,
            model=self.served_model or self.model,
        )


def error_text(body: str) -> str:
    """The message of an error body, in the shapes servers use: OpenAI's and Ollama's
    `{"error": {"message", "type"}}`, vLLM's `{"object": "error", "message", "type"}`,
    llama.cpp's `{"error": {"code", "message", "type"}}`, or plain text. The type is kept
    beside the message: it is often the only machine-readable part."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:500]
    err = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(err, str):
        return err[:500]
    if not isinstance(err, dict):
        return body.strip()[:500]
    message = str(err.get("message") or "")
    kind = err.get("type")
    return (f"{message} ({kind})" if kind and str(kind) not in message else message)[:500]


_CONTEXT = re.compile(
    r"context (length|size|window)|maximum context|exceed_context_size|"
    r"too many tokens|prompt is too long|reduce the length",
    re.IGNORECASE,
)
_NO_MODEL = re.compile(
    r"model\b.*\b(not found|does not exist|is not loaded|not available)|"
    r"no such model|unknown model|not a valid model|model_not_found|"
    r"NotFoundError|not_found_error",
    re.IGNORECASE,
)


# A request refused for carrying too much at once (inputs, or tokens over the whole batch):
# a smaller batch passes. Each alternative is the wording of a real server.
_BATCH = re.compile(
    r"too many (inputs|texts|documents|items|strings|sentences|elements)|"
    r"max(imum)?( allowed)? (number of (inputs|texts|items|documents)|batch size|batch)|"
    r"batch size( limit|.{0,40}(exceeds|too (large|big)|greater than|>))|"
    r"batch (is )?too (large|big)|input array (is )?too (long|large)|"
    r"(request|payload|body)( entity)? too large|"
    r"at most \d+ (requests|inputs|texts|items|documents) (can be )?in (one|a single) (batch|request)|"
    r"should have at most \d+ items|"
    r"tokens per (submitted )?(batch|request)",
    re.IGNORECASE,
)


def says_batch_too_large(message: str) -> bool:
    """OpenAI and Azure: "Too many inputs. The max number of inputs is 16."; Cohere: "too many
    texts"; Mistral: "Too many inputs in request, split into more batches"; text-embeddings-
    inference: "batch size 64 > maximum allowed batch size 32"; Voyage: "The batch size limit
    is 128" and "The max allowed tokens per submitted batch is 120000"; Gemini: "At most 100
    requests can be in one batch"; Jina: "input array too long"; a validating server: "List
    should have at most 32 items"; a proxy: "413 Request Entity Too Large"."""
    return bool(_BATCH.search(message))


def says_context_exceeded(message: str) -> bool:
    """vLLM: "This model's maximum context length is 4096 tokens. However, you requested…";
    OpenRouter: "This endpoint's maximum context length is…"; llama.cpp: "the request exceeds
    the available context size" (exceed_context_size_error)."""
    return bool(_CONTEXT.search(message))


def says_model_missing(message: str) -> bool:
    """vLLM: "The model `x` does not exist." (NotFoundError); Ollama: 'model "x" not found,
    try pulling it first'; OpenRouter: "x is not a valid model ID"."""
    return bool(_NO_MODEL.search(message))
