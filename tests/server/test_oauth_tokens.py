"""Access tokens as the resource server checks them, against a real JWKS served over HTTP on
127.0.0.1 with keys made by `cryptography`: a good token passes and names its person; an expired
one, one for another audience, one signed by an unknown key, an `alg: none` one and one from
another issuer are each refused with the reason; a rotated JWKS is picked up without a restart,
and an unknown key id re-reads the JWKS at most once per interval. Introspection (RFC 7662) is
asked over HTTP too."""

from __future__ import annotations

import pytest

from fathom.errors import ConfigError
from fathom.server.oauth.access_tokens import AccessTokens, parse_algorithms
from fathom.server.oauth.errors import TokenRefused
from fathom.server.oauth.introspection import Introspection
from fathom.server.oauth.keys import KeySet, metadata_urls
from tests.server.oauth_fixtures import (
    INTROSPECTION_CLIENT,
    RESOURCE,
    Issuer,
    ManualClock,
    ec_key,
    rsa_key,
    running_issuer,
    unsigned,
)


def verifier(issuer: Issuer, clock: ManualClock, **kwargs) -> AccessTokens:
    keys = KeySet(issuer=issuer.url, clock=clock, refetch_after_s=30)
    return AccessTokens(
        keys, issuer=issuer.url, audience=RESOURCE, algorithms=("RS256", "ES256"), now=clock.now, **kwargs
    )


async def refused(tokens: AccessTokens, token: str) -> str:
    with pytest.raises(TokenRefused) as caught:
        await tokens.verify(token)
    assert token not in str(caught.value)  # a refusal never carries the token
    return caught.value.reason


async def test_a_good_token_names_its_person_and_scopes():
    clock = ManualClock()
    async with running_issuer(rsa_key()) as issuer:
        tokens = verifier(issuer, clock)
        who = await tokens.verify(issuer.mint(now=clock.now(), groups=["web", "ops"], scope="fathom read"))
        assert (who.subject, who.email, who.name) == ("user-1", "alice@example.com", "alice@example.com")
        assert who.groups == {"web", "ops"} and who.scopes == {"fathom", "read"}
        assert issuer.jwks_reads == 1  # found through the issuer's metadata, read once
        await tokens.verify(issuer.mint(now=clock.now()))
        assert issuer.jwks_reads == 1  # cached


async def test_an_expired_token_is_refused_and_one_not_yet_valid_too():
    clock = ManualClock()
    async with running_issuer(rsa_key()) as issuer:
        tokens = verifier(issuer, clock)
        token = issuer.mint(now=clock.now(), lifetime=300)
        await tokens.verify(token)
        clock.t += 300 + 31  # past exp and the 30 s leeway
        assert "expired" in await refused(tokens, token)
        early = issuer.mint(now=clock.now(), nbf=int(clock.now() + 3600))
        assert "not valid yet" in await refused(tokens, early)


async def test_a_token_for_another_audience_is_refused():
    clock = ManualClock()
    async with running_issuer(rsa_key()) as issuer:
        tokens = verifier(issuer, clock)
        assert "another audience" in await refused(
            tokens, issuer.mint(now=clock.now(), aud="https://other.example/api")
        )
        assert "`aud`" in await refused(tokens, issuer.mint(now=clock.now(), aud=None))


async def test_a_token_signed_by_an_unknown_key_is_refused():
    clock = ManualClock()
    async with running_issuer(rsa_key("published")) as issuer:
        tokens = verifier(issuer, clock)
        stranger = rsa_key("stranger")
        assert "does not publish" in await refused(tokens, issuer.mint(stranger, now=clock.now()))
        # The published key id, but another key's signature: the signature does not verify.
        forged = rsa_key("published")
        assert "signature does not verify" in await refused(tokens, issuer.mint(forged, now=clock.now()))


async def test_an_alg_none_token_and_an_hmac_one_are_refused():
    clock = ManualClock()
    async with running_issuer(rsa_key("k1")) as issuer:
        tokens = verifier(issuer, clock)
        claims = {"iss": issuer.url, "aud": RESOURCE, "sub": "mallory", "exp": int(clock.now() + 600)}
        assert "'none' is not one this server accepts" in await refused(tokens, unsigned(claims, "k1"))
        import jwt

        # HS256 with the issuer's public key as the "secret": the classic confusion, refused by name.
        hmac = jwt.encode(
            claims, "a-public-key-anyone-can-read-000000", algorithm="HS256", headers={"kid": "k1"}
        )
        assert "'HS256' is not one" in await refused(tokens, hmac)
        assert issuer.jwks_reads == 0  # refused before any key was fetched


async def test_a_token_from_another_issuer_is_refused():
    clock = ManualClock()
    key = rsa_key()
    async with running_issuer(key) as issuer:
        tokens = verifier(issuer, clock)
        other = issuer.mint(now=clock.now(), iss="https://evil.example")
        assert "another authorization server" in await refused(tokens, other)


async def test_a_rotated_jwks_is_picked_up_without_a_restart_and_refetches_are_rate_limited():
    clock = ManualClock()
    old, new = rsa_key("2026-old"), ec_key("2026-new")
    async with running_issuer(old) as issuer:
        tokens = verifier(issuer, clock)
        await tokens.verify(issuer.mint(now=clock.now()))
        assert issuer.jwks_reads == 1
        issuer.published = [new]  # the issuer rotates: a new key, the old one withdrawn
        clock.t += 31
        who = await tokens.verify(issuer.mint(new, now=clock.now()))  # unknown kid: re-read, found
        assert who.subject == "user-1" and issuer.jwks_reads == 2
        assert tokens.keys.held() == ["2026-new"]
        assert "does not publish" in await refused(tokens, issuer.mint(old, now=clock.now()))
        # Made-up key ids cannot make the server hammer the issuer: one re-read per 30 s.
        for n in range(5):
            await refused(tokens, issuer.mint(rsa_key(f"made-up-{n}"), now=clock.now()))
        assert issuer.jwks_reads == 2
        clock.t += 31
        await refused(tokens, issuer.mint(rsa_key("made-up-later"), now=clock.now()))
        assert issuer.jwks_reads == 3


async def test_the_jwks_is_read_again_when_it_is_old():
    clock = ManualClock()
    async with running_issuer(rsa_key()) as issuer:
        tokens = verifier(issuer, clock)
        await tokens.verify(issuer.mint(now=clock.now()))
        clock.t += 3600
        await tokens.verify(issuer.mint(now=clock.now()))
        assert issuer.jwks_reads == 2


async def test_an_unreachable_issuer_refuses_the_token():
    clock = ManualClock()
    async with running_issuer(rsa_key()) as issuer:
        token = issuer.mint(now=clock.now())
        url = issuer.url
    keys = KeySet(issuer=url, clock=clock)
    tokens = AccessTokens(keys, issuer=url, audience=RESOURCE, now=clock.now)
    assert "could not be read" in await refused(tokens, token)


async def test_an_issuer_outage_keeps_the_keys_read_and_does_not_hammer_it(caplog):
    caplog.set_level("WARNING", logger="fathom.server.oauth")

    def stale_warnings() -> int:
        return sum("keys read" in r.getMessage() for r in caplog.records)

    clock = ManualClock()
    async with running_issuer(rsa_key()) as issuer:
        keys = KeySet(issuer=issuer.url, clock=clock, max_age_s=3600, refetch_after_s=30, stale_grace_s=7200)
        tokens = AccessTokens(keys, issuer=issuer.url, audience=RESOURCE, now=clock.now)
        await tokens.verify(issuer.mint(now=clock.now()))
        assert issuer.jwks_reads == 1
        issuer.down = True
        clock.t += 3601  # the keys are old: read again, which fails; the held key still verifies
        assert (await tokens.verify(issuer.mint(now=clock.now()))).subject == "user-1"
        assert issuer.jwks_reads == 2
        # A failed read is not retried at every request (each would wait for its timeout)...
        for _ in range(5):
            await tokens.verify(issuer.mint(now=clock.now()))
        assert "could not be read" in await refused(tokens, issuer.mint(rsa_key("rotated"), now=clock.now()))
        assert issuer.jwks_reads == 2
        assert stale_warnings() == 1  # logged once per failed read, not at every request
        clock.t += 31  # ...but once per refetch interval
        await tokens.verify(issuer.mint(now=clock.now()))
        assert issuer.jwks_reads == 3 and stale_warnings() == 2
        # Past the grace, keys that could not be re-read verify nothing.
        clock.t += 7200
        assert "could not be read" in await refused(tokens, issuer.mint(now=clock.now()))
        # The issuer back: the next read after the interval succeeds and verifies again.
        issuer.down = False
        clock.t += 31
        assert (await tokens.verify(issuer.mint(now=clock.now()))).subject == "user-1"


def test_the_algorithm_allow_list_refuses_none_and_shared_secrets():
    assert parse_algorithms("RS256, ES256") == ("RS256", "ES256")
    for bad in ("none", "RS256,HS256", "XX999", ""):
        with pytest.raises(ConfigError, match="FATHOM_OAUTH_ALGORITHMS"):
            parse_algorithms(bad)


def test_metadata_urls_follow_both_discovery_rules():
    assert metadata_urls("https://id.example.com") == [
        "https://id.example.com/.well-known/openid-configuration",
        "https://id.example.com/.well-known/oauth-authorization-server",
    ]
    assert metadata_urls("https://id.example.com/realms/dev/") == [
        "https://id.example.com/realms/dev/.well-known/openid-configuration",
        "https://id.example.com/.well-known/oauth-authorization-server/realms/dev",
    ]


async def test_introspection_asks_the_issuer_and_checks_its_answer():
    clock = ManualClock()
    async with running_issuer(rsa_key()) as issuer:
        client_id, secret = INTROSPECTION_CLIENT
        intro = Introspection(
            f"{issuer.url}/introspect",
            client_id=client_id,
            client_secret=secret,
            issuer=issuer.url,
            audience=RESOURCE,
            now=clock.now,
        )
        base = {
            "active": True,
            "iss": issuer.url,
            "aud": RESOURCE,
            "sub": "bob",
            "scope": "fathom",
            "exp": int(clock.now() + 600),
        }
        issuer.active = {
            "opaque-good": base,
            "opaque-aud": {**base, "aud": "https://other.example"},
            "opaque-iss": {**base, "iss": "https://evil.example"},
            "opaque-old": {**base, "exp": int(clock.now() - 1)},
        }
        who = await intro.verify("opaque-good")
        assert who.subject == "bob" and who.scopes == {"fathom"}
        for token, words in (
            ("opaque-aud", "another audience"),
            ("opaque-iss", "another authorization server"),
            ("opaque-old", "expired"),
            ("revoked", "not active"),
        ):
            with pytest.raises(TokenRefused, match=words):
                await intro.verify(token)
        wrong = Introspection(
            f"{issuer.url}/introspect",
            client_id=client_id,
            client_secret="wrong-secret",
            issuer=issuer.url,
            audience=RESOURCE,
            now=clock.now,
        )
        with pytest.raises(TokenRefused, match="could not be asked"):
            await wrong.verify("opaque-good")
