"""Access tokens as this server checks them: a JWT signed by the configured issuer, for this
server's resource, within its lifetime, under an algorithm of the allow-list (RFC 9068, the
MCP authorization specification's "validate the audience; no pass-through").

It owns the order of the checks and what each refusal says: the header's algorithm against the
allow-list (so `alg: none` and the HMAC family, whose "key" would be the issuer's public one,
never reach a verifier), the issuer before any key is fetched, then the signature with the
issuer's key (`keys.KeySet`), the audience and the issuer again on the verified claims, and
`exp`/`nbf` against the injected wall clock (`now`) with a small leeway. Signatures are PyJWT's and
`cryptography`'s: nothing here does cryptography.

It refuses to decide what a person may touch (`mapping`) and to keep a token: a token is read,
judged and dropped; only what its claims say survives, as an `Identity`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jwt

from fathom.errors import ConfigError
from fathom.server.oauth.errors import TokenRefused
from fathom.server.oauth.keys import KeySet

# Never accepted, whatever the configuration says: `none` signs nothing, and an HMAC "key" would
# be the issuer's public key, which anyone can read.
FORBIDDEN_ALGORITHMS = frozenset({"none", "HS256", "HS384", "HS512"})
DEFAULT_ALGORITHMS = ("RS256", "PS256", "ES256", "EdDSA")


def parse_algorithms(text: str) -> tuple[str, ...]:
    """The allow-list FATHOM_OAUTH_ALGORITHMS names, each one an asymmetric algorithm PyJWT
    verifies; a `ConfigError` naming the one that is not."""
    names = tuple(dict.fromkeys(a.strip() for a in text.replace(" ", ",").split(",") if a.strip()))
    supported = jwt.algorithms.get_default_algorithms()
    for name in names:
        if name in FORBIDDEN_ALGORITHMS or name.lower() == "none":
            raise ConfigError(
                f"FATHOM_OAUTH_ALGORITHMS names {name}, which this server never accepts (no "
                f"signature, or a shared secret); list asymmetric ones, e.g. RS256,ES256"
            )
        if name not in supported:
            raise ConfigError(
                f"FATHOM_OAUTH_ALGORITHMS names {name!r}, which is not a signature algorithm this "
                f"server knows; choose from {', '.join(sorted(set(supported) - FORBIDDEN_ALGORITHMS))}"
            )
    if not names:
        raise ConfigError("FATHOM_OAUTH_ALGORITHMS is empty; name at least one, e.g. RS256")
    return names


@dataclass(frozen=True)
class Identity:
    """Who a valid access token speaks for, from its claims."""

    subject: str
    issuer: str
    email: str | None = None
    groups: frozenset[str] = field(default_factory=frozenset)
    scopes: frozenset[str] = field(default_factory=frozenset)
    # The issuer vouches the person owns `email` (`email_verified: true`); rules on the email
    # or its domain hold only then, or anyone could claim an address at a trusted domain.
    email_verified: bool = False

    @property
    def name(self) -> str:
        """The person, as the audit log and the dashboard name them: the email, else the subject."""
        return self.email or self.subject

    @classmethod
    def of(cls, claims: Mapping[str, Any], *, issuer: str, groups_claim: str = "groups") -> Identity:
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise TokenRefused("it carries no subject (`sub`)")
        email = claims.get("email")
        groups = claims.get(groups_claim)
        return cls(
            subject=subject,
            issuer=issuer,
            email=email if isinstance(email, str) and email else None,
            groups=frozenset(_strings(groups)),
            scopes=frozenset(scopes_of(claims)),
            email_verified=_verified(claims.get("email_verified")),
        )


def _verified(claim: Any) -> bool:
    """`email_verified` as OpenID Connect says it (a JSON true; some issuers send "true")."""
    return claim is True or (isinstance(claim, str) and claim.lower() == "true")


def scopes_of(claims: Mapping[str, Any]) -> list[str]:
    """A token's scopes: `scope`, space-separated (RFC 9068), or a `scp` list."""
    scope = claims.get("scope")
    if isinstance(scope, str):
        return scope.split()
    return list(_strings(claims.get("scp")))


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, str)]
    return []


class AccessTokens:
    """Local validation of JWT access tokens against the issuer's keys."""

    def __init__(
        self,
        keys: KeySet,
        *,
        issuer: str,
        audience: str,
        algorithms: Iterable[str] = DEFAULT_ALGORITHMS,
        groups_claim: str = "groups",
        leeway_s: float = 30.0,
        now: Callable[[], float] = time.time,
    ):
        self.keys = keys
        self.issuer = issuer
        self.audience = audience
        self.algorithms = tuple(algorithms)
        self.groups_claim = groups_claim
        self.leeway_s = leeway_s
        self.now = now  # wall-clock seconds (a token's `exp` is one), injected for tests

    async def verify(self, token: str) -> Identity:
        """The token's `Identity`, or `TokenRefused` saying why not."""
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.InvalidTokenError:
            raise TokenRefused("it is not a JWT access token") from None
        algorithm = header.get("alg")
        if algorithm not in self.algorithms:
            raise TokenRefused(
                f"its algorithm {str(algorithm)[:20]!r} is not one this server accepts "
                f"({', '.join(self.algorithms)})"
            )
        if unverified.get("iss") != self.issuer:
            raise TokenRefused(f"it was issued by another authorization server, not {self.issuer}")
        kid = header.get("kid")
        key = await self.keys.key(kid if isinstance(kid, str) else None)
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=self.audience,
                issuer=self.issuer,
                options={
                    "require": ["iss", "aud", "exp", "sub"],
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                },
            )
        except jwt.InvalidAudienceError:
            raise TokenRefused(f"it is for another audience, not this server ({self.audience})") from None
        except jwt.InvalidIssuerError:
            raise TokenRefused(f"it was issued by another authorization server, not {self.issuer}") from None
        except jwt.InvalidSignatureError:
            raise TokenRefused("its signature does not verify with the issuer's key") from None
        except jwt.MissingRequiredClaimError as exc:
            raise TokenRefused(f"it carries no `{exc.claim}` claim") from None
        except (jwt.InvalidTokenError, jwt.PyJWKError):
            raise TokenRefused("it is not a valid JWT access token") from None
        self._check_lifetime(claims)
        return Identity.of(claims, issuer=self.issuer, groups_claim=self.groups_claim)

    def _check_lifetime(self, claims: Mapping[str, Any]) -> None:
        now = self.now()
        exp, nbf = claims.get("exp"), claims.get("nbf")
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            raise TokenRefused("its expiry (`exp`) is not a time")
        if now > exp + self.leeway_s:
            raise TokenRefused("it has expired; sign in again")
        if nbf is not None and (not isinstance(nbf, int | float) or now + self.leeway_s < nbf):
            raise TokenRefused("it is not valid yet (`nbf` is in the future)")
