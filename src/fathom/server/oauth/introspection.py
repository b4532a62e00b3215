"""Token introspection (RFC 7662): the issuer says whether an access token is active, for
authorization servers whose tokens are opaque, or when the operator wants revocation to take
effect at once (FATHOM_OAUTH_INTROSPECTION_URL with this server's client id and secret).

It owns the request (the token in a form body, the client's credentials in HTTP Basic, never in
a URL or a log line) and the checks on the answer: `active`, then the issuer, the audience and
the lifetime when the answer states them. An answer that cannot be read refuses the token (fail
closed).

It refuses to cache answers: each request asks, so a revoked token stops at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import httpx

from fathom.server.oauth.access_tokens import Identity
from fathom.server.oauth.errors import IssuerUnreachable, TokenRefused

log = logging.getLogger("fathom.server.oauth")


class Introspection:
    """Asks the issuer's introspection endpoint about each token."""

    def __init__(
        self,
        url: str,
        *,
        client_id: str,
        client_secret: str,
        issuer: str,
        audience: str,
        groups_claim: str = "groups",
        http: httpx.AsyncClient | None = None,
        now: Callable[[], float] = time.time,
        timeout_s: float = 10.0,
    ):
        self.url = url
        self.issuer = issuer
        self.audience = audience
        self.groups_claim = groups_claim
        self.now = now  # wall-clock seconds, as `exp` is
        self._auth = httpx.BasicAuth(client_id, client_secret)
        self._http = http or httpx.AsyncClient(timeout=timeout_s, follow_redirects=False)

    async def verify(self, token: str) -> Identity:
        try:
            response = await self._http.post(
                self.url,
                data={"token": token, "token_type_hint": "access_token"},
                auth=self._auth,
                headers={"Accept": "application/json"},
            )
            response.raise_for_status()
            answer = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("could not introspect a token at %s: %s", self.url, type(exc).__name__)
            raise IssuerUnreachable(
                f"the issuer could not be asked about it ({type(exc).__name__}); try again later"
            ) from None
        if not isinstance(answer, dict) or answer.get("active") is not True:
            raise TokenRefused("the issuer says it is not active (expired, revoked or unknown)")
        if "iss" in answer and answer["iss"] != self.issuer:
            raise TokenRefused(f"it was issued by another authorization server, not {self.issuer}")
        if self.audience not in _audiences(answer.get("aud")):
            raise TokenRefused(f"it is for another audience, not this server ({self.audience})")
        exp = answer.get("exp")
        if isinstance(exp, int | float) and self.now() > exp:
            raise TokenRefused("it has expired; sign in again")
        return Identity.of(answer, issuer=self.issuer, groups_claim=self.groups_claim)

    async def aclose(self) -> None:
        await self._http.aclose()


def _audiences(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        return [value]
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
