"""The one OpenRouter client, and the `Provider` adapter over it.

This module owns the wire: request bodies for embeddings, rerank, chat completions, key
info and credits; validation of every response (one finite vector of the expected width per
input, in index order). Every documented failure it meets comes out as a typed
`ProviderError` that carries its evidence and says whether waiting helps: those types, and
the mapping of an HTTP answer to them, are `openrouter_errors`' (exported from here too).

It refuses to do policy. It takes no budget permit (`budget.BudgetedProvider` wraps it), does
not refuse an unpinned embedding route (the gate does), and never retries: a caller that
holds the budget decides what a 429 means for the next request.

The key is whoever-holds-it's (the sidecar's). It lives in one private attribute, is read
only to build the Authorization header of each request, and never reaches a log line, an
exception message, a repr or a str. httpx logs request lines at INFO and httpcore logs
connection events at DEBUG, neither with header values; `tests/inference/test_openrouter_key.py`
captures DEBUG on every logger to prove it stays that way.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn

import httpx
import numpy as np

from fathom.inference.chatwire import (
    ChatStream,
    ChatWireError,
    parse_completion,
    sse_payloads,
)
from fathom.inference.openrouter_errors import (
    BadRequest,
    BatchTooLarge,
    ContextLengthExceeded,
    Forbidden,
    InFlightBudgetExhausted,
    InsufficientCredits,
    InvalidResponse,
    ModelNotFound,
    OpenRouterError,
    RateLimited,
    StreamError,
    Unauthorized,
    UpstreamError,
    UpstreamMismatch,
    UpstreamUnavailable,
    error_from,
    parse_retry_after,
)
from fathom.inference.provider import ChatResult, Kind, Provider, ProviderInfo
from fathom.roles import Role

DEFAULT_BASE_URL = "https://openrouter.ai/api/v1"
DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=10.0)

# The client's API, with the typed failures it raises (defined in `openrouter_errors`).
__all__ = [
    "DEFAULT_BASE_URL",
    "DEFAULT_TIMEOUT",
    "EmbeddingResult",
    "RateLimitInfo",
    "KeyInfo",
    "Credits",
    "pin",
    "OpenRouterClient",
    "OpenRouterProvider",
    "OpenRouterError",
    "RateLimited",
    "InFlightBudgetExhausted",
    "InsufficientCredits",
    "Unauthorized",
    "Forbidden",
    "BadRequest",
    "ModelNotFound",
    "ContextLengthExceeded",
    "BatchTooLarge",
    "UpstreamUnavailable",
    "UpstreamError",
    "StreamError",
    "InvalidResponse",
    "UpstreamMismatch",
    "parse_retry_after",
]

# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class EmbeddingResult:
    vectors: np.ndarray  # (n, width) float32, row i for input i
    model: str | None
    upstream: str | None  # the provider that served, as the response names it
    usage: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RateLimitInfo:
    """The deprecated `rate_limit` object of GET /key: a hint at best (it may be absent,
    or degenerate like 1 per minute), never a ceiling to trust on its own."""

    requests: int
    interval: str  # read by `fathom.inference.budget.ceiling.interval_seconds`


@dataclass(frozen=True)
class KeyInfo:
    label: str | None
    limit: float | None
    limit_remaining: float | None
    usage: float | None
    is_free_tier: bool | None
    rate_limit: RateLimitInfo | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Credits:
    total_credits: float
    total_usage: float

    @property
    def remaining(self) -> float:
        return self.total_credits - self.total_usage


def pin(slug: str, mode: Literal["order", "only"] = "order") -> dict[str, Any]:
    """The provider routing object that pins one upstream, fallbacks off: an embedding route must
    not be served by two upstreams."""
    if mode == "order":
        return {"order": [slug], "allow_fallbacks": False}
    if mode == "only":
        return {"only": [slug], "allow_fallbacks": False}
    raise ValueError(f"pin mode must be 'order' or 'only', not {mode!r}")


class _Key:
    """Holds the key so that no repr, str, format or pickle of any object around it shows it."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def header(self) -> str:
        return f"Bearer {self._value}"

    def scrub(self, text: str) -> str:
        return text.replace(self._value, "<redacted>") if self._value else text

    def __repr__(self) -> str:
        return "<key redacted>"

    __str__ = __repr__

    def __reduce__(self) -> NoReturn:  # never pickle a secret
        raise TypeError("an OpenRouter key cannot be pickled")


# --------------------------------------------------------------------------- client


class OpenRouterClient:
    """Async client for OpenRouter's documented API (or a compatible emulator)."""

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        http: httpx.AsyncClient | None = None,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
    ):
        if not api_key:
            raise Unauthorized("no OpenRouter key was given; push one to this sidecar first")
        self.__key = _Key(api_key)
        self.base_url = base_url.rstrip("/")
        self._owns_http = http is None
        self._http = http or httpx.AsyncClient(timeout=timeout)

    def __repr__(self) -> str:
        return f"<OpenRouterClient {self.base_url}>"

    __str__ = __repr__

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> OpenRouterClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- endpoints

    async def embeddings(
        self,
        model: str,
        inputs: Sequence[str],
        *,
        provider: Mapping[str, Any] | None = None,
        encoding_format: Literal["float", "base64"] = "float",
        expected_width: int | None = None,
    ) -> EmbeddingResult:
        texts = list(inputs)
        body: dict[str, Any] = {"model": model, "input": texts, "encoding_format": encoding_format}
        if provider:
            body["provider"] = dict(provider)
        data = await self._post_json("/embeddings", body)
        upstream = _str_or_none(data.get("provider"))
        vectors = _validate_embeddings(
            data, len(texts), expected_width, encoding_format, model=model, upstream=upstream
        )
        return EmbeddingResult(
            vectors=vectors,
            model=_str_or_none(data.get("model")) or model,
            upstream=upstream,
            usage=dict(data.get("usage") or {}),
        )

    async def rerank(
        self,
        model: str,
        query: str,
        documents: Sequence[str],
        *,
        top_n: int | None = None,
        provider: Mapping[str, Any] | None = None,
    ) -> list[tuple[int, float]]:
        """(document index, relevance score) pairs, best first, as the response ranks them."""
        docs = list(documents)
        body: dict[str, Any] = {"model": model, "query": query, "documents": docs}
        if top_n is not None:
            body["top_n"] = top_n
        if provider:
            body["provider"] = dict(provider)
        data = await self._post_json("/rerank", body)
        upstream = _str_or_none(data.get("provider"))
        results = data.get("results")
        if not isinstance(results, list):
            raise InvalidResponse(
                "rerank response has no results list",
                expected="list",
                got=type(results).__name__,
                model=model,
                upstream=upstream,
            )
        out: list[tuple[int, float]] = []
        seen: set[int] = set()
        for item in results:
            try:
                idx, score = int(item["index"]), float(item["relevance_score"])
            except (KeyError, TypeError, ValueError):
                raise InvalidResponse(
                    "rerank result without index/relevance_score",
                    expected="{index, relevance_score}",
                    got=item,
                    model=model,
                    upstream=upstream,
                ) from None
            if not 0 <= idx < len(docs) or idx in seen or not math.isfinite(score):
                raise InvalidResponse(
                    "rerank result out of range, repeated or not finite",
                    expected=f"unique index in [0, {len(docs)})",
                    got={"index": idx, "score": score},
                    model=model,
                    upstream=upstream,
                )
            seen.add(idx)
            out.append((idx, score))
        want = len(docs) if top_n is None else min(top_n, len(docs))
        if len(out) != want:
            raise InvalidResponse(
                "rerank returned the wrong number of results",
                expected=want,
                got=len(out),
                model=model,
                upstream=upstream,
            )
        return out

    async def chat(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        provider: Mapping[str, Any] | None = None,
        stream: bool = False,
        on_delta: Callable[[str], Awaitable[None] | None] | None = None,
        **opts: Any,
    ) -> ChatResult:
        body: dict[str, Any] = {"model": model, "messages": [dict(m) for m in messages], **opts}
        if tools:
            body["tools"] = [dict(t) for t in tools]
        if provider:
            body["provider"] = dict(provider)
        if not stream:
            data = await self._post_json("/chat/completions", body)
            return _parse_chat(data, model)
        body["stream"] = True
        return await self._stream_chat(body, model, on_delta)

    async def key_info(self) -> KeyInfo:
        data = (await self._request("GET", "/key")).get("data")
        if not isinstance(data, dict):
            raise InvalidResponse("GET /key has no data object", expected="object", got=data)
        rl = data.get("rate_limit")
        rate_limit = None
        if isinstance(rl, dict) and rl.get("requests") is not None:
            try:
                rate_limit = RateLimitInfo(int(rl["requests"]), str(rl.get("interval") or ""))
            except (TypeError, ValueError):
                rate_limit = None
        return KeyInfo(
            label=_str_or_none(data.get("label")),
            limit=_num_or_none(data.get("limit")),
            limit_remaining=_num_or_none(data.get("limit_remaining")),
            usage=_num_or_none(data.get("usage")),
            is_free_tier=data.get("is_free_tier") if isinstance(data.get("is_free_tier"), bool) else None,
            rate_limit=rate_limit,
            raw=data,
        )

    async def credits(self) -> Credits | None:
        """Total credits and usage, or None when the key may not read them (only
        management keys may: 401/403 is the expected answer for an inference key)."""
        try:
            data = (await self._request("GET", "/credits")).get("data")
        except (Unauthorized, Forbidden):
            return None
        if not isinstance(data, dict):
            raise InvalidResponse("GET /credits has no data object", expected="object", got=data)
        try:
            return Credits(float(data["total_credits"]), float(data["total_usage"]))
        except (KeyError, TypeError, ValueError):
            raise InvalidResponse(
                "GET /credits lacks total_credits/total_usage", expected="numbers", got=data
            ) from None

    # -- transport

    def _headers(self) -> dict[str, str]:
        return {"Authorization": self.__key.header(), "Content-Type": "application/json"}

    async def _post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._request("POST", path, body)

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        url = self.base_url + path
        try:
            resp = await self._http.request(method, url, json=body, headers=self._headers())
        except httpx.TimeoutException as exc:
            raise UpstreamError(
                f"OpenRouter did not answer {method} {path} in time ({type(exc).__name__}); retry later"
            ) from None
        except httpx.TransportError as exc:
            raise UpstreamError(
                f"could not reach OpenRouter at {self.base_url} "
                f"({type(exc).__name__}); check the network and base URL"
            ) from None
        if resp.status_code != 200:
            raise self._error_from(resp.status_code, resp.headers, resp.text, path)
        try:
            data = resp.json()
        except ValueError:
            raise InvalidResponse(
                f"{path} answered 200 with a body that is not JSON",
                expected="JSON",
                got=self.__key.scrub(resp.text)[:200],
            ) from None
        if not isinstance(data, dict):
            raise InvalidResponse(
                f"{path} answered 200 with a non-object body", expected="object", got=type(data).__name__
            )
        if isinstance(data.get("error"), dict) and "choices" not in data and "data" not in data:
            # Documented: an error raised while the model produces output comes back in a
            # 200 body. Same mapping as the status it names.
            err = data["error"]
            status = err.get("code") if isinstance(err.get("code"), int) else 502
            raise self._error_from(status, resp.headers, json.dumps(data), path)
        return data

    async def _stream_chat(
        self, body: dict[str, Any], model: str, on_delta: Callable[[str], Awaitable[None] | None] | None
    ) -> ChatResult:
        url = self.base_url + "/chat/completions"
        stream = ChatStream(model)
        try:
            async with self._http.stream("POST", url, json=body, headers=self._headers()) as resp:
                if resp.status_code != 200:
                    text = (await resp.aread()).decode("utf-8", "replace")
                    raise self._error_from(resp.status_code, resp.headers, text, "/chat/completions")
                async for payload in sse_payloads(resp.aiter_lines()):
                    try:
                        chunk = json.loads(payload)
                    except ValueError:
                        raise InvalidResponse(
                            "a streamed chat chunk is not JSON",
                            expected="JSON",
                            got=self.__key.scrub(payload)[:200],
                            model=model,
                        ) from None
                    if isinstance(chunk.get("error"), dict):
                        err = chunk["error"]
                        meta = err.get("metadata") if isinstance(err.get("metadata"), dict) else {}
                        msg = self.__key.scrub(str(err.get("message") or "stream error"))
                        code = err.get("code")
                        raise StreamError(
                            f"the streamed chat from {model} failed mid-stream (code {code}): {msg}; "
                            f"the partial answer was dropped, retry the request",
                            status=200,
                            code=code,
                            metadata=meta,
                            upstream_message=msg,
                            partial=stream.text,
                            retryable=not (
                                isinstance(code, int) and 400 <= code < 500 and code not in (408, 429)
                            ),
                        )
                    await stream.take(chunk, on_delta)
        except httpx.TimeoutException as exc:
            raise UpstreamError(
                f"the chat stream from {model} stalled ({type(exc).__name__}); retry"
            ) from None
        except httpx.TransportError as exc:
            raise UpstreamError(f"the chat stream from {model} broke ({type(exc).__name__}); retry") from None
        return stream.result()

    def _error_from(
        self, status: int, headers: httpx.Headers | Mapping[str, str], text: str, path: str
    ) -> OpenRouterError:
        return error_from(status, headers, text, path, self.__key.scrub)


def _str_or_none(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def _num_or_none(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _validate_embeddings(
    data: Mapping[str, Any],
    n: int,
    expected_width: int | None,
    encoding_format: str,
    *,
    model: str,
    upstream: str | None,
) -> np.ndarray:
    """Every rule a vector table depends on: count, index order, width, finite values."""

    def bad(problem: str, expected: Any, got: Any, **evidence: Any) -> InvalidResponse:
        return InvalidResponse(
            problem, expected=expected, got=got, evidence=evidence, model=model, upstream=upstream
        )

    items = data.get("data")
    if not isinstance(items, list):
        raise bad("embeddings response has no data list", "list", type(items).__name__)
    if len(items) != n:
        raise bad("one vector per input", n, len(items))
    try:
        indices = [int(it["index"]) for it in items]
    except (KeyError, TypeError, ValueError):
        raise bad("every embedding item carries an integer index", "index", None) from None
    if sorted(indices) != list(range(n)):
        raise bad("indices are exactly 0..n-1", list(range(n)), sorted(indices))
    rows: list[np.ndarray] = [np.empty(0)] * n
    for it in items:
        raw = it.get("embedding")
        if isinstance(raw, str):
            try:
                buf = base64.b64decode(raw, validate=True)
            except (binascii.Error, ValueError):
                raise bad("base64 embedding does not decode", "base64 float32", raw[:40]) from None
            if len(buf) % 4:
                raise bad("base64 embedding is not whole float32 values", "multiple of 4 bytes", len(buf))
            vec = np.frombuffer(buf, dtype="<f4").astype(np.float32)
        elif isinstance(raw, list):
            try:
                vec = np.asarray(raw, dtype=np.float32)
            except (TypeError, ValueError):
                raise bad("float embedding holds non-numbers", "numbers", str(raw[:3])) from None
            if vec.ndim != 1:
                raise bad("an embedding is one flat list", 1, vec.ndim)
        else:
            raise bad(f"embedding in {encoding_format} format", encoding_format, type(raw).__name__)
        rows[int(it["index"])] = vec
    widths = [len(r) for r in rows]
    want = expected_width if expected_width is not None else widths[0] if widths else 0
    wrong = [i for i, w in enumerate(widths) if w != want]
    if wrong:
        raise bad("every vector has the expected width", want, widths[wrong[0]], rows=wrong[:10])
    if n == 0:
        return np.zeros((0, want), dtype=np.float32)
    matrix = np.stack(rows).astype(np.float32, copy=False)
    finite = np.isfinite(matrix).all(axis=1)
    if not finite.all():
        rows_bad = np.flatnonzero(~finite).tolist()
        raise bad("every value is finite", "finite floats", "NaN or inf", rows=rows_bad[:10])
    return matrix


def _parse_chat(data: Mapping[str, Any], model: str) -> ChatResult:
    try:
        return parse_completion(data, model)
    except ChatWireError as exc:
        raise InvalidResponse(exc.problem, expected=exc.expected, got=exc.got, model=model) from None


def _slug_norm(name: str) -> str:
    return "".join(ch for ch in name.split("/")[0].lower() if ch.isalnum())


# --------------------------------------------------------------------------- provider


class OpenRouterProvider(Provider):
    """A thin `Provider` over `OpenRouterClient`: one model, optionally pinned to one upstream.

    Embeddings go out with the pin (fallbacks off) and come back validated at the route's
    width; an answer that names another upstream than the pin is refused. It takes no budget
    permit and does not refuse a missing pin: the budget wrapper and the gate do that.
    """

    def __init__(
        self,
        client: OpenRouterClient,
        *,
        model: str,
        roles: Iterable[Role],
        upstream: str | None = None,
        width: int | None = None,
        provider_id: str | None = None,
        pin_mode: Literal["order", "only"] = "order",
        max_tokens: int | None = None,
    ):
        self.client = client
        self.pin_mode = pin_mode
        self.last_upstream: str | None = None
        self.info = ProviderInfo(
            id=provider_id or f"openrouter:{model}@{upstream or 'any'}",
            kind=Kind.CLOUD,
            roles=frozenset(Role.parse(r) for r in roles),
            model=model,
            width=width,
            upstream=upstream,
            max_tokens=max_tokens,
        )

    @property
    def _routing(self) -> dict[str, Any] | None:
        return pin(self.info.upstream, self.pin_mode) if self.info.upstream else None

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        result = await self.client.embeddings(
            self.info.model, texts, provider=self._routing, expected_width=self.info.width
        )
        self.last_upstream = result.upstream
        pinned = self.info.upstream
        if pinned and result.upstream and _slug_norm(result.upstream) != _slug_norm(pinned):
            raise UpstreamMismatch(
                "a pinned request was served by another upstream",
                expected=pinned,
                got=result.upstream,
                model=self.info.model,
                upstream=result.upstream,
            )
        return result.vectors

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        ranked = await self.client.rerank(self.info.model, query, documents, provider=self._routing)
        scores = [0.0] * len(documents)
        for idx, score in ranked:
            scores[idx] = score
        return scores

    async def chat(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResult:
        return await self.client.chat(
            self.info.model, messages, tools=tools, provider=self._routing, **options
        )

    async def aclose(self) -> None:
        await self.client.aclose()
