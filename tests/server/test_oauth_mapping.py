"""The claims-to-access mapping: the first matching rule grants an MCP token's access (projects,
read-only or may index), every condition of a rule must hold, nobody matched is refused, and a bad
document is refused whole before anything is written."""

from __future__ import annotations

import json

import pytest

from fathom.errors import ConfigError
from fathom.server.oauth.access_tokens import Identity
from fathom.server.oauth.mapping import AccessMapping

ALICE = Identity(
    subject="u-1",
    issuer="https://id.example",
    email="Alice@Example.com",
    groups=frozenset({"web"}),
    scopes=frozenset({"fathom"}),
    email_verified=True,
)
BOB = Identity(
    subject="u-2",
    issuer="https://id.example",
    email="bob@other.org",
    groups=frozenset({"indexers"}),
    scopes=frozenset({"fathom", "fathom:index"}),
    email_verified=True,
)
CAROL = Identity(subject="u-3", issuer="https://id.example")


def test_the_first_matching_rule_grants_and_every_condition_must_hold(tmp_path):
    mapping = AccessMapping(tmp_path / "oauth_mapping.json")
    assert mapping.grant(ALICE) is None  # no rule: nobody gets in
    mapping.replace(
        {
            "rules": [
                {"match": {"group": "indexers", "scope": "fathom:index"}, "can_index": True},
                {"match": {"email_domain": "example.com", "group": "web"}, "projects": ["web", "api"]},
                {"match": {"subject": "u-3"}, "projects": ["docs"]},
            ]
        }
    )
    alice = mapping.grant(ALICE)
    assert alice is not None and alice.projects == {"web", "api"} and not alice.can_index
    assert alice.who == "oauth:Alice@Example.com" and not alice.admin
    bob = mapping.grant(BOB)
    assert bob is not None and bob.projects is None and bob.can_index
    carol = mapping.grant(CAROL)
    assert carol is not None and carol.who == "oauth:u-3" and carol.projects == {"docs"}
    # One condition short: no grant.
    assert mapping.grant(Identity(subject="u-4", issuer="x", groups=frozenset({"indexers"}))) is None
    # The file is read back the same by a restarted server.
    again = AccessMapping(tmp_path / "oauth_mapping.json")
    assert again.grant(ALICE) == alice and len(again.rules) == 3


def test_everyone_must_be_said_in_words(tmp_path):
    mapping = AccessMapping(tmp_path / "m.json")
    with pytest.raises(ConfigError, match="must name a condition"):
        mapping.replace({"rules": [{"match": {}, "projects": ["web"]}]})
    mapping.replace({"rules": [{"match": {"everyone": True}, "projects": ["web"]}]})
    assert mapping.grant(CAROL) is not None and mapping.rules[0].view()["describes"] == "everyone"


@pytest.mark.parametrize(
    "document, words",
    [
        ({"rules": [{"match": {"email": "a@b"}, "projects": []}]}, "project list is empty"),
        ({"rules": [{"match": {"emial": "a@b"}}]}, "emial"),
        ({"rules": [{"match": {"email": "a@b"}, "can_index": "yes please"}]}, "can_index"),
        ({"rules": [{"match": {"email": "a@b"}, "projects": ["bad\nname"]}]}, "invalid project name"),
        ({"rulez": []}, "rulez"),
    ],
)
def test_a_bad_document_is_refused_whole_and_changes_nothing(tmp_path, document, words):
    path = tmp_path / "m.json"
    mapping = AccessMapping(path)
    mapping.replace({"rules": [{"match": {"email": "alice@example.com"}}]})
    before = path.read_text()
    with pytest.raises(ConfigError, match=words):
        mapping.replace(document)
    assert path.read_text() == before and mapping.grant(ALICE) is not None


def test_a_damaged_file_is_refused_at_start_with_the_fix(tmp_path):
    path = tmp_path / "m.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="set-mapping"):
        AccessMapping(path)
    path.write_text(json.dumps({"rules": [{"match": {}}]}))
    with pytest.raises(ConfigError, match="must name a condition"):
        AccessMapping(path)


@pytest.mark.parametrize("verified", [None, False, "false", 0, "yes"])
def test_an_email_rule_needs_an_email_the_issuer_verified(tmp_path, verified):
    mapping = AccessMapping(tmp_path / "m.json")
    mapping.replace(
        {
            "rules": [
                {"match": {"email": "alice@example.com"}, "projects": ["web"]},
                {"match": {"email_domain": "example.com"}, "projects": ["api"]},
            ]
        }
    )
    claims = {"sub": "u-1", "email": "alice@example.com", "email_verified": verified}
    unverified = Identity.of({k: v for k, v in claims.items() if v is not None}, issuer="x")
    assert not unverified.email_verified and mapping.grant(unverified) is None
    for said in (True, "true"):
        trusted = Identity.of({**claims, "email_verified": said}, issuer="x")
        grant = mapping.grant(trusted)
        assert trusted.email_verified and grant is not None and grant.projects == {"web"}
