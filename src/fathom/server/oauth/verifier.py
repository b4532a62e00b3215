"""OAuth's check at `/mcp`: an access token in, the `Principal` the mapping grants out.

`OAuthVerifier` is the facade the request guard holds: it checks a token (locally as a JWT,
`access_tokens`, or at the issuer, `introspection`), requires the configured scopes, applies
the operator's mapping (`mapping`) and answers with the same `Principal` a static MCP token
gives, so everything behind the guard (project scopes, read-only tools, the audit log) holds
for a person as for a token. `from_settings` builds it from the `FATHOM_OAUTH_*` settings, or
returns None when no issuer is set (no OAuth).

It refuses to keep or log a token, and to pass one on: the token is judged and dropped.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

from fathom.clock import Clock
from fathom.config import Settings
from fathom.errors import ConfigError
from fathom.server.oauth.access_tokens import AccessTokens, Identity, parse_algorithms
from fathom.server.oauth.errors import InsufficientScope, NotMapped
from fathom.server.oauth.introspection import Introspection
from fathom.server.oauth.keys import KeySet
from fathom.server.oauth.mapping import FILENAME, AccessMapping
from fathom.server.oauth.resource import ResourceServer, check_resource_url
from fathom.server.tokens import Principal

log = logging.getLogger("fathom.server.oauth")


class Verifier(Protocol):
    async def verify(self, token: str) -> Identity: ...


class OAuthVerifier:
    """Access tokens of one authorization server, mapped to principals."""

    def __init__(
        self,
        *,
        resource: ResourceServer,
        verifier: Verifier,
        mapping: AccessMapping,
        required_scopes: tuple[str, ...] = (),
        audience: str | None = None,
    ):
        self.resource = resource
        self.verifier = verifier
        self.mapping = mapping
        self.required_scopes = required_scopes
        self.audience = audience or resource.resource

    @property
    def issuer(self) -> str:
        return self.resource.authorization_servers[0]

    async def authenticate(self, token: str) -> Principal:
        """The principal `token` opens `/mcp` as; `TokenRefused`, `InsufficientScope` or
        `NotMapped` otherwise."""
        who = await self.verifier.verify(token)
        missing = [s for s in self.required_scopes if s not in who.scopes]
        if missing:
            raise InsufficientScope(missing)
        principal = self.mapping.grant(who)
        if principal is None:
            raise NotMapped(who.name)
        return principal

    def view(self) -> dict[str, Any]:
        """What the dashboard and `fathom oauth show` say: never a secret."""
        keys = getattr(self.verifier, "keys", None)
        return {
            "issuer": self.issuer,
            "resource": self.resource.resource,
            "audience": self.audience,
            "metadata_url": self.resource.metadata_url,
            "scopes": list(self.required_scopes),
            "validation": "introspection" if isinstance(self.verifier, Introspection) else "jwt",
            "algorithms": list(getattr(self.verifier, "algorithms", ())),
            "jwks_url": getattr(keys, "jwks_url", None),
            "keys_held": keys.held() if keys is not None else [],
            "mapping": self.mapping.view(),
        }

    async def aclose(self) -> None:
        for part in (self.verifier, getattr(self.verifier, "keys", None)):
            close = getattr(part, "aclose", None)
            if close is not None:
                await close()

    @classmethod
    def from_settings(
        cls, settings: Settings, *, clock: Clock | None = None, http: Any = None
    ) -> OAuthVerifier | None:
        """The door the settings describe; None without FATHOM_OAUTH_ISSUER."""
        issuer = (settings.oauth_issuer or "").strip()
        if not issuer:
            return None
        if not settings.oauth_resource:
            raise ConfigError(
                "FATHOM_OAUTH_ISSUER is set but FATHOM_OAUTH_RESOURCE is not: set it to this server's "
                "MCP URL as clients reach it, e.g. https://fathom.example.com/mcp (access tokens must "
                "name it as their audience)"
            )
        resource_url = check_resource_url(settings.oauth_resource.strip())
        scopes = tuple(dict.fromkeys(settings.oauth_scopes.replace(",", " ").split()))
        resource = ResourceServer(resource=resource_url, authorization_servers=(issuer,), scopes=scopes)
        audience = (settings.oauth_audience or "").strip() or resource_url
        groups = settings.oauth_groups_claim
        verifier: Verifier
        if settings.oauth_introspection_url:
            secret = settings.secret(settings.oauth_client_secret)
            if not settings.oauth_client_id or not secret:
                raise ConfigError(
                    "FATHOM_OAUTH_INTROSPECTION_URL needs this server's client credentials at the "
                    "issuer: set FATHOM_OAUTH_CLIENT_ID and FATHOM_OAUTH_CLIENT_SECRET"
                )
            verifier = Introspection(
                settings.oauth_introspection_url,
                client_id=settings.oauth_client_id,
                client_secret=secret,
                issuer=issuer,
                audience=audience,
                groups_claim=groups,
                http=http,
            )
        else:
            keys = KeySet(issuer=issuer, jwks_url=settings.oauth_jwks_url or None, http=http, clock=clock)
            verifier = AccessTokens(
                keys,
                issuer=issuer,
                audience=audience,
                algorithms=parse_algorithms(settings.oauth_algorithms),
                groups_claim=groups,
            )
        mapping = AccessMapping(Path(settings.oauth_mapping_file or settings.data_dir / FILENAME))
        return cls(
            resource=resource, verifier=verifier, mapping=mapping, required_scopes=scopes, audience=audience
        )
