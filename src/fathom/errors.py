"""Typed errors shared across Fathom.

Every refusal says what was wrong and what to do about it, and carries its evidence as
attributes. No error message ever contains a secret: the OpenRouter key is never passed to
an exception constructor.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import TypeVar

_Choice = TypeVar("_Choice", bound=StrEnum)


class FathomError(Exception):
    """Base of every error Fathom raises on purpose."""


class ConfigError(FathomError):
    """Bad configuration or request input; nothing was written."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = problems or [message]


class OutOfRange(ConfigError):
    """A numeric argument outside its bounds (a tool's `line`, a search's `k`, a limit)."""

    def __init__(self, name: str, value: object, low: int, high: int):
        self.name, self.value, self.low, self.high = name, value, low, high
        shown = repr(value) if len(repr(value)) <= 40 else f"a value of {len(repr(value))} characters"
        super().__init__(f"{name} must be a whole number from {low} to {high}, got {shown}")


def whole_number(name: str, value: object, low: int, high: int) -> int:
    """`value` if it is an int (not a bool) within [low, high]; `OutOfRange` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise OutOfRange(name, value, low, high)
    return value


def did_you_mean(name: str, known: Iterable[object]) -> str:
    """ " Did you mean 'x'?" for the known name closest to a mistyped `name`; "" when none is close."""
    import difflib

    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=1, cutoff=0.75)
    return f" Did you mean {close[0]!r}?" if close else ""


class InvalidRole(ConfigError):
    pass


def one_of(choices: type[_Choice], value: str, error: type[ConfigError], noun: str) -> _Choice:
    """`choices(value)` for an enum of names (roles, policies), or `error` listing every name."""
    try:
        return choices(value)
    except ValueError:
        names = ", ".join(c.value for c in choices)
        raise error(f"unknown {noun} {value!r}: use one of {names}") from None


class InvalidPolicy(ConfigError):
    pass


class PinRequired(ConfigError):
    """An embedding route without an upstream pin: refused before any probe, since two
    upstreams serving one model id can split a vector space."""

    def __init__(self, role: str, model: str | None = None):
        self.role = role
        self.model = model
        super().__init__(
            f"the {role} route to OpenRouter has no upstream pin: two upstreams serving "
            f"{model or 'the same model'} can return different vectors and split the table's "
            f"vector space. Set one, e.g. `fathom policy set {role} --upstream <provider-slug>`."
        )


class UnknownJob(FathomError):
    """No index job has this id (in this process, or in the kept record of an earlier one)."""

    def __init__(self, job_id: str, hint: str):
        self.job_id = job_id
        super().__init__(f"no index job {job_id!r}; {hint}")


class JobConflict(FathomError):
    """An action that does not apply to a job's state (resume a running job, pause a finished
    one); nothing was changed."""

    def __init__(self, job_id: str, state: str, message: str):
        self.job_id, self.state = job_id, state
        super().__init__(message)


class ProviderError(FathomError):
    """A provider failed to serve a request. Subclasses say whether waiting helps."""

    retryable: bool = True


class ProviderUnavailable(ProviderError):
    """The provider cannot serve now (disconnected, key missing, ejected)."""


class NoProviderAvailable(FathomError):
    """No provider allowed by the role's policy can serve; the message names why."""


class StoreError(FathomError):
    pass


class WidthMismatch(StoreError):
    def __init__(self, table: str, expected: int, got: int):
        self.table, self.expected, self.got = table, expected, got
        super().__init__(
            f"table {table!r} is one vector space of width {expected}; refused a vector of "
            f"width {got}. Use an encoder of width {expected}, or re-index into a new table."
        )


class NotCleared(StoreError):
    """A row whose provenance is not a cleared verdict for the table: the store, as the
    gate's second lock, refuses it."""

    def __init__(self, table: str, provider_id: str, verdict_id: str | None, reason: str = ""):
        self.table, self.provider_id, self.verdict_id = table, provider_id, verdict_id
        super().__init__(
            f"table {table!r} refused rows from provider {provider_id!r} (verdict "
            f"{verdict_id or 'none'}): it holds no cleared gate verdict for this table"
            + (f" ({reason})" if reason else "")
            + ". Run `fathom gate verify` for this provider first."
        )


class DiskFull(StoreError):
    """The disk (or quota) holding Fathom's data is full. Nothing half-written is ever made
    active: the write that failed belonged to a shadow slot or an atomic rename."""

    def __init__(self, detail: str = ""):
        self.detail = detail
        super().__init__(
            "no space left on the disk holding Fathom's data"
            + (f" ({detail})" if detail else "")
            + ": free some space (or point --data-dir / FATHOM_DATA_DIR at a larger disk), "
            "then run the same command again. The active index is unchanged; a full run "
            "resumes from the rows already written."
        )


_DISK_FULL_ERRNOS = {28, 122}  # ENOSPC, EDQUOT
_DISK_FULL_TEXTS = ("no space left on device", "os error 28", "disk quota exceeded", "os error 122")


def is_disk_full(exc: BaseException) -> bool:
    """True for the failures a full disk or an exhausted quota produce, whether they come as
    an OSError or wrapped in another library's error (LanceDB reports `os error 28` in text)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno in _DISK_FULL_ERRNOS:
            return True
        if any(t in str(cause).lower() for t in _DISK_FULL_TEXTS):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def failure_of(exc: BaseException) -> FathomError | None:
    """The typed error an anticipated failure stands for, or None for a genuine bug.

    Front ends (the CLI, the admin API, the MCP tools, index jobs) call this on an exception
    that is not already a `FathomError`, so a full disk or a lost database reads as one line
    naming the fix, never as a traceback."""
    if isinstance(exc, FathomError):
        return exc
    if is_disk_full(exc):
        return DiskFull(" ".join(str(exc).split())[:200])
    if any(
        k.__module__.split(".")[0] == "psycopg" and k.__name__ in ("OperationalError", "InterfaceError")
        for k in type(exc).__mro__
    ):
        # The connection dropped mid-operation (the server stopped, the network went away).
        # libpq's text names host and port, never the password.
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return StoreLost(first[:200])
    return None


class StoreLost(StoreError):
    """The database went away in the middle of an operation."""

    def __init__(self, detail: str):
        self.detail = detail
        super().__init__(
            f"lost the connection to the PostgreSQL store mid-operation ({detail}). Check that "
            f"the database is running and reachable, then run the same command again: the "
            f"active index is unchanged and a full run resumes from the rows already written."
        )
