"""Typed errors shared across Fathom.

Every refusal says what was wrong and what to do about it, and carries its evidence as
attributes. No error message ever contains a secret: the OpenRouter key is never passed to
an exception constructor.
"""

from __future__ import annotations


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


class InvalidRole(ConfigError):
    pass


class InvalidPolicy(ConfigError):
    pass


class PinRequired(ConfigError):
    """An embedding route without an upstream pin: refused before any probe (R4)."""

    def __init__(self, role: str, model: str | None = None):
        self.role = role
        self.model = model
        super().__init__(
            f"the {role} route to OpenRouter has no upstream pin: two upstreams serving "
            f"{model or 'the same model'} can return different vectors and split the table's "
            f"vector space. Set one, e.g. `fathom policy set {role} --upstream <provider-slug>`."
        )


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
    """A row whose provenance is not a cleared verdict for the table (R3, second lock)."""

    def __init__(self, table: str, provider_id: str, verdict_id: str | None, reason: str = ""):
        self.table, self.provider_id, self.verdict_id = table, provider_id, verdict_id
        super().__init__(
            f"table {table!r} refused rows from provider {provider_id!r} (verdict "
            f"{verdict_id or 'none'}): it holds no cleared gate verdict for this table"
            + (f" ({reason})" if reason else "")
            + ". Run `fathom gate verify` for this provider first."
        )
