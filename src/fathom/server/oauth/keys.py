"""The authorization server's signing keys: its JWKS, fetched over HTTP, cached, and re-read
when a token names a key it does not hold (the issuer rotated its keys).

It owns where the keys are (`FATHOM_OAUTH_JWKS_URL`, or the `jwks_uri` of the issuer's own
metadata, RFC 8414 / OpenID Connect discovery), how long a fetched set is kept (`max_age_s`),
and how often an unknown key id may cause a re-fetch (at most once per `refetch_after_s`, so a
client sending made-up key ids cannot make this server hammer the issuer). When the issuer
cannot be reached, a failed read is not retried for `refetch_after_s` either (requests do not
each wait for its timeout), and keys read less than `max_age_s + stale_grace_s` ago keep
verifying the tokens they signed, with a warning in the log: an issuer's short outage does not
sign everyone out. Time is the injected clock's.

It refuses to verify anything (that is `access_tokens`) and to invent a key: a key id the
issuer does not publish, after a re-read, is an unknown key.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import urlsplit

import httpx
import jwt

from fathom.clock import Clock, SystemClock
from fathom.server.oauth.errors import IssuerUnreachable, TokenRefused

log = logging.getLogger("fathom.server.oauth")

DISCOVERY_PATHS = ("/.well-known/openid-configuration", "/.well-known/oauth-authorization-server")


def metadata_urls(issuer: str) -> list[str]:
    """Where an issuer publishes its metadata: OpenID Connect discovery, then RFC 8414 (with the
    issuer's path after the well-known part, as RFC 8414 puts it)."""
    parsed = urlsplit(issuer.rstrip("/"))
    origin, path = f"{parsed.scheme}://{parsed.netloc}", parsed.path.strip("/")
    return [
        f"{origin}/{path}{DISCOVERY_PATHS[0]}" if path else origin + DISCOVERY_PATHS[0],
        f"{origin}{DISCOVERY_PATHS[1]}/{path}" if path else origin + DISCOVERY_PATHS[1],
    ]


class KeySet:
    """The issuer's JWKS as this server last read it. `key(kid)` is the verifying key."""

    def __init__(
        self,
        *,
        issuer: str,
        jwks_url: str | None = None,
        http: httpx.AsyncClient | None = None,
        clock: Clock | None = None,
        max_age_s: float = 3600.0,
        refetch_after_s: float = 30.0,
        timeout_s: float = 10.0,
        stale_grace_s: float = 6 * 3600.0,
    ):
        self.issuer = issuer
        self.jwks_url = jwks_url
        self.clock = clock or SystemClock()
        self.max_age_s = max_age_s
        self.refetch_after_s = refetch_after_s
        self.stale_grace_s = stale_grace_s
        self._failure: str | None = None  # why the last read failed, and when
        self._failed_at = 0.0
        self._warned_at: float | None = None  # the failure the stale-keys warning was logged for
        self._http = http or httpx.AsyncClient(timeout=timeout_s, follow_redirects=False)
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._lock = asyncio.Lock()
        self.fetches = 0  # how many times the JWKS was read (the dashboard and tests see it)

    async def key(self, kid: str | None) -> jwt.PyJWK:
        """The key `kid` names (a token without `kid`: the issuer's only key). A kid not held
        re-reads the JWKS, at most once per `refetch_after_s`."""
        now = self.clock.now()
        stale = self._fetched_at is None or now - self._fetched_at >= self.max_age_s
        if stale or (self._find(kid) is None and now - (self._fetched_at or 0.0) >= self.refetch_after_s):
            try:
                await self._refresh(self.fetches)
            except IssuerUnreachable:
                age = now - (self._fetched_at or 0.0)
                if self._find(kid) is None or age >= self.max_age_s + self.stale_grace_s:
                    raise
                if self._warned_at != self._failed_at:  # once per failed read, not per request
                    self._warned_at = self._failed_at
                    log.warning(
                        "verifying with the OAuth issuer's keys read %.0f s ago: they could not be read "
                        "again",
                        age,
                    )
        found = self._find(kid)
        if found is None:
            raise TokenRefused(
                "it is signed by a key the issuer does not publish"
                if kid is not None
                else "it names no key (`kid`) and the issuer publishes more than one"
            )
        return found

    def _find(self, kid: str | None) -> jwt.PyJWK | None:
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    async def _refresh(self, seen: int) -> None:
        async with self._lock:
            if self.fetches != seen:
                return  # another request re-read it while this one waited
            if self._failure is not None and self.clock.now() - self._failed_at < self.refetch_after_s:
                raise IssuerUnreachable(self._failure)  # it failed a moment ago: not asked again yet
            try:
                url = self.jwks_url or await self._discover()
                document = await self._get_json(url, "JWKS")
            except IssuerUnreachable as exc:
                self._failure, self._failed_at = exc.reason, self.clock.now()
                raise
            self._failure = None
            keys: dict[str, jwt.PyJWK] = {}
            for entry in document.get("keys", []) if isinstance(document, dict) else []:
                if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                    continue
                try:
                    key = jwt.PyJWK(entry)
                except (jwt.PyJWKError, jwt.InvalidKeyError):
                    continue  # a key type or curve this server does not verify with: left out
                keys[str(entry.get("kid", f"#{len(keys)}"))] = key
            self._keys = keys
            self._fetched_at = self.clock.now()
            self.fetches += 1

    async def _discover(self) -> str:
        unreachable: IssuerUnreachable | None = None
        for url in metadata_urls(self.issuer):
            try:
                document = await self._get_json(url, "metadata")
            except IssuerUnreachable as exc:
                unreachable = exc
                continue
            if isinstance(document, dict) and isinstance(document.get("jwks_uri"), str):
                self.jwks_url = document["jwks_uri"]
                return self.jwks_url
        if unreachable is not None:
            raise unreachable
        raise IssuerUnreachable(
            f"the issuer {self.issuer} publishes no metadata with a jwks_uri; set FATHOM_OAUTH_JWKS_URL"
        )

    async def _get_json(self, url: str, what: str) -> Any:
        try:
            response = await self._http.get(url, headers={"Accept": "application/json"})
            response.raise_for_status()
            return response.json()
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("could not read the OAuth issuer's %s at %s: %s", what, url, type(exc).__name__)
            raise IssuerUnreachable(
                f"the issuer's keys could not be read ({type(exc).__name__}); try again later"
            ) from None

    def held(self) -> list[str]:
        """The key ids held now."""
        return sorted(self._keys)

    async def aclose(self) -> None:
        await self._http.aclose()
