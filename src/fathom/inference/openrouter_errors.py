"""The failures OpenRouter answers with, as typed errors.

What it owns: one `ProviderError` subclass per documented failure (a rate limit, an in-flight
budget, credits, the key, a malformed request, a model or an upstream not served, a context
or a batch too large, an upstream down, a stream broken, a 200 that breaks the contract),
each carrying its evidence and saying whether waiting helps (`retryable`, `retry_after`);
and `error_from`, the one mapping of an HTTP answer to them, Retry-After read by
`parse_retry_after`.

What it refuses to do: keep any upstream text the key could hide in (the caller's `scrub`
runs over the message and the metadata first), or keep the raw upstream body of a refused
batch (it may echo the inputs, i.e. indexed code).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, TypedDict

from fathom.errors import ProviderError
from fathom.inference.chatwire import says_batch_too_large, says_context_exceeded, says_model_missing

if TYPE_CHECKING:
    import httpx

# OpenRouter tags an in-flight-budget 402 either way, depending on the doc version:
# `metadata.reason` (seen in the wild) and `metadata.limit_source` (the limits page).
IN_FLIGHT_REASON = "in_flight_budget_exhausted"
IN_FLIGHT_LIMIT_SOURCE = "openrouter_in_flight_budget"


class OpenRouterError(ProviderError):
    """A request to OpenRouter failed. `status` is the HTTP status (None for a transport
    failure), `code`/`message`/`metadata` come from the documented error body
    `{"error": {"code", "message", "metadata"}}`."""

    retryable = False

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: int | str | None = None,
        metadata: Mapping[str, Any] | None = None,
        upstream_message: str | None = None,
        retryable: bool | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.code = code
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.upstream_message = upstream_message
        if retryable is not None:
            self.retryable = retryable


class RateLimited(OpenRouterError):
    """429: wait `retry_after` seconds (from the Retry-After header) when given."""

    retryable = True
    throttle_kind = "429"  # what the pool's is_throttle and the budget's throttle_of read

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any):
        super().__init__(message, **kw)
        self.retry_after = retry_after


class InFlightBudgetExhausted(OpenRouterError):
    """402 with reason in_flight_budget_exhausted: too much estimated spend in flight for the
    balance. Transient: wait `retry_after` and send less at once."""

    retryable = True
    throttle_kind = "402"

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any):
        super().__init__(message, **kw)
        self.retry_after = retry_after


class InsufficientCredits(OpenRouterError):
    """Any other 402: the account or key is out of credits; waiting does not help."""


class Unauthorized(OpenRouterError):
    """401: the key is missing, invalid, disabled or revoked."""


class Forbidden(OpenRouterError):
    """403: valid key without the permission (management-only endpoint, guardrail, key limit)."""


class BadRequest(OpenRouterError):
    """400 (or a 404/4xx that is not about routing): the request itself is wrong."""


class ModelNotFound(BadRequest):
    """The model asked for is not served there (OpenRouter: not a valid model ID; a local
    server: not pulled, not loaded, another served name). Waiting does not help; naming a
    model the server serves does."""


class ContextLengthExceeded(BadRequest):
    """The request does not fit the model's context window. Waiting does not help; a shorter
    request (fewer or smaller messages, a lower max_tokens) or a model with a longer context
    does. The request's fault, not the provider's: it never counts towards an ejection."""

    provider_fault = False


class BatchTooLarge(BadRequest):
    """400 or 413: the request carried more than the upstream takes at once (too many inputs,
    too many tokens over the batch, a body over a size limit). The same inputs in smaller
    requests pass, so the embedding pool halves that provider's batch and keeps the size as
    its ceiling (`too_large`, duck-typed like `throttle_kind`). Not the provider's fault: it
    never counts towards an ejection."""

    too_large = True
    provider_fault = False


class UpstreamUnavailable(OpenRouterError):
    """No endpoint satisfies the provider routing: the pinned upstream does not serve the
    model (404 "No endpoints found", not retryable) or is down right now (503, retryable)."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any):
        super().__init__(message, **kw)
        self.retry_after = retry_after


class UpstreamError(OpenRouterError):
    """5xx, a timeout, or a transport failure: the model or the path to it failed."""

    retryable = True


class StreamError(OpenRouterError):
    """An error event inside a streamed chat (HTTP status was already 200). `partial` holds
    the content delivered before it."""

    def __init__(self, message: str, *, partial: str = "", **kw: Any):
        super().__init__(message, **kw)
        self.partial = partial


class InvalidResponse(OpenRouterError):
    """A 200 whose body breaks the contract (count, order, width, finite values, shape).
    `problem` names the rule, `expected`/`got` and `evidence` carry what was seen."""

    def __init__(
        self,
        problem: str,
        *,
        expected: Any = None,
        got: Any = None,
        evidence: Mapping[str, Any] | None = None,
        model: str | None = None,
        upstream: str | None = None,
    ):
        self.problem, self.expected, self.got = problem, expected, got
        self.evidence = dict(evidence or {})
        self.model, self.upstream = model, upstream
        where = f"{model or 'the model'} via {upstream or 'an unnamed upstream'}"
        super().__init__(
            f"OpenRouter returned an invalid response from {where}: {problem} "
            f"(expected {expected!r}, got {got!r}). Nothing was used from it; check the pin "
            f"and the table's width, or report the upstream."
        )


class UpstreamMismatch(InvalidResponse):
    """A pinned request was answered by another upstream: its vectors may be from another
    space, so they are refused."""


def parse_retry_after(value: str | None, *, now: Callable[[], datetime] | None = None) -> float | None:
    """Retry-After is delay-seconds or an HTTP-date (RFC 9110 §10.2.3)."""
    if value is None:
        return None
    value = value.strip()
    try:
        secs = float(value)
        return max(0.0, secs) if math.isfinite(secs) else None
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = (now or (lambda: datetime.now(UTC)))()
    return max(0.0, (when - current).total_seconds())


def error_from(
    status: int, headers: httpx.Headers | Mapping[str, str], text: str, path: str, scrub: Callable[[str], str]
) -> OpenRouterError:
    """The typed error for an OpenRouter answer of `status` with body `text` to `path`;
    `scrub` takes the key out of any upstream text first (no upstream is trusted not to echo
    it)."""
    code: int | str | None = status
    message = ""
    limit: int | None = None  # an error body's message is kept whole
    metadata: dict[str, Any] = {}
    try:
        body = json.loads(text)
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict):
            code = err.get("code", status)
            message = str(err.get("message") or "")
            if isinstance(err.get("metadata"), dict):
                metadata = err["metadata"]
    except ValueError:
        message, limit = text, 300  # a page, not an error body: its start says enough
    # Defence in depth: no upstream text is trusted not to echo the key. Scrubbed whole, then
    # cut: a cut first could leave the start of a key that straddles it.
    message = scrub(message)[:limit]
    metadata = json.loads(scrub(json.dumps(metadata, default=str)))
    retry_after = parse_retry_after(headers.get("retry-after"))
    kw: _ErrorFields = {"status": status, "code": code, "metadata": metadata, "upstream_message": message}
    said = f": {message}" if message else ""
    where = f"OpenRouter {path} answered {status}{said}"
    too_large = says_batch_too_large(f"{message} {_raw_text(metadata)}")
    if status in (400, 413) and (too_large or (status == 413 and not says_context_exceeded(message))):
        # OpenRouter relays an upstream's refusal as "Provider returned error" with the
        # upstream's own body in `metadata.raw`; only the recognised fact is kept, never
        # the raw text (a validation error may echo the inputs, i.e. indexed code).
        return BatchTooLarge(
            f"OpenRouter {path} answered {status}: the request carried more "
            f"inputs than the upstream takes at once. Send fewer per request "
            f"(an index job halves its batch for this provider and keeps "
            f"that size as its ceiling).",
            **kw,
        )
    if status in (400, 413) and says_context_exceeded(message):
        return ContextLengthExceeded(
            f"{where}. The request does not fit the model's context; "
            f"send less, or choose a model with a longer context.",
            **kw,
        )
    if status in (400, 404) and says_model_missing(message) and "no endpoints found" not in message.lower():
        return ModelNotFound(f"{where}. Set the role's model to one OpenRouter serves.", **kw)
    if status == 400:
        return BadRequest(f"{where}. The request is malformed; fix the parameters.", **kw)
    if status == 401:
        return Unauthorized(
            f"{where}. The key is missing, invalid or revoked; push a valid key with `fathom key push`.",
            **kw,
        )
    if status == 402:
        if (
            metadata.get("reason") == IN_FLIGHT_REASON
            or metadata.get("limit_source") == IN_FLIGHT_LIMIT_SOURCE
        ):
            return InFlightBudgetExhausted(
                f"{where}. Too much estimated spend is in flight for the balance; wait "
                f"{_secs(retry_after)} and send fewer requests at once.",
                retry_after=retry_after,
                **kw,
            )
        return InsufficientCredits(
            f"{where}. The account or key is out of credits; add credits or raise the key's limit.", **kw
        )
    if status == 403:
        return Forbidden(f"{where}. The key lacks the permission (or a guardrail blocked the request).", **kw)
    if status == 404 and "no endpoints found" in message.lower():
        return UpstreamUnavailable(
            f"{where}. No upstream allowed by the provider routing "
            f"serves this model; pin an upstream that does.",
            retry_after=retry_after,
            **kw,
        )
    if status == 429:
        return RateLimited(
            f"{where}. Rate limited; wait {_secs(retry_after)} before the next request.",
            retry_after=retry_after,
            **kw,
        )
    if status == 503:
        return UpstreamUnavailable(
            f"{where}. No upstream meeting the routing requirements "
            f"is available now; wait {_secs(retry_after)} and retry.",
            retry_after=retry_after,
            retryable=True,
            **kw,
        )
    if status == 408 or status >= 500:
        return UpstreamError(f"{where}. The upstream failed; retry later.", **kw)
    return BadRequest(f"{where}. The request was refused; fix it before retrying.", **kw)


class _ErrorFields(TypedDict):
    """What every typed OpenRouter error carries of the answer that caused it."""

    status: int
    code: int | str | None
    metadata: Mapping[str, Any]
    upstream_message: str


def _raw_text(metadata: Mapping[str, Any]) -> str:
    """The upstream's own error body that OpenRouter relays in `metadata.raw` (a string, or
    already an object), as text to recognise a refusal in; "" when there is none."""
    raw = metadata.get("raw")
    if raw is None:
        return ""
    return raw if isinstance(raw, str) else json.dumps(raw, default=str)


def _secs(retry_after: float | None) -> str:
    return "the time Retry-After names" if retry_after is None else f"{retry_after:g} s"
