"""What OAuth refuses, as typed errors: each names the reason and the fix, never the token."""

from __future__ import annotations

from fathom.errors import FathomError


class TokenRefused(FathomError):
    """An access token this server does not accept (expired, another audience or issuer, an
    unknown key, a forbidden algorithm, inactive at introspection). `reason` is what the
    client is told in `error_description`; it never carries the token."""

    def __init__(self, reason: str):
        super().__init__(f"the access token was refused: {reason}")
        self.reason = reason


class IssuerUnreachable(TokenRefused):
    """The authorization server's keys or introspection endpoint could not be read: the token
    cannot be checked, so it is refused (fail closed) and the cause is logged."""


class NotMapped(FathomError):
    """A valid token whose person no rule of the mapping grants anything."""

    def __init__(self, who: str):
        super().__init__(
            f"{who} signed in, but no rule of this server's OAuth mapping grants them access; "
            f"ask the operator to add one (`fathom oauth set-mapping FILE`)"
        )
        self.who = who


class InsufficientScope(FathomError):
    """A valid token without the scopes this server requires (`FATHOM_OAUTH_SCOPES`)."""

    def __init__(self, missing: list[str]):
        super().__init__(f"the access token lacks the scope(s) {' '.join(missing)} this server requires")
        self.missing = missing
