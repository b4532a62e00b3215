"""The vocabulary: roles, policies, the behaviour table and the persisted routing state."""

import json

import pytest

from fathom.config import RoleRoute, RoutingState, RoutingStore
from fathom.errors import ConfigError, InvalidPolicy, InvalidRole
from fathom.policy import BEHAVIOUR, DEFAULT_POLICY, Policy, Reference
from fathom.roles import DEFAULTS, EMBEDDING_ROLES, FallbackMode, Role


def test_five_roles_with_the_documented_defaults():
    assert {r.value for r in Role} == {"embedding", "code-embedding", "reranker", "code-assistant", "rlm"}
    assert DEFAULTS[Role.RERANKER].model == "qwen/qwen3-reranker-8b"
    assert DEFAULTS[Role.CODE_ASSISTANT].model == "poolside/laguna-s-2.1"
    assert DEFAULTS[Role.RLM].model == "deepseek/deepseek-v4-flash"
    assert DEFAULTS[Role.RLM].fallback is FallbackMode.LOCAL_ONLY
    assert EMBEDDING_ROLES == {Role.EMBEDDING, Role.CODE_EMBEDDING}
    assert Role.CODE_EMBEDDING.table == "code" and Role.EMBEDDING.table == "docs"
    assert not Role.RERANKER.stateful


def test_behaviour_table():
    assert DEFAULT_POLICY is Policy.AGGREGATE
    assert (BEHAVIOUR[Policy.LOCAL].local, BEHAVIOUR[Policy.LOCAL].cloud) == (True, False)
    assert (BEHAVIOUR[Policy.CLOUD].local, BEHAVIOUR[Policy.CLOUD].cloud) == (False, True)
    assert BEHAVIOUR[Policy.BACKUP].cloud_reserve_only
    assert not BEHAVIOUR[Policy.AGGREGATE].cloud_reserve_only
    assert BEHAVIOUR[Policy.CLOUD].reference is Reference.CLOUD
    assert all(
        BEHAVIOUR[p].reference is Reference.LOCAL for p in (Policy.LOCAL, Policy.AGGREGATE, Policy.BACKUP)
    )


def test_unknown_names_are_typed_errors_naming_the_choices():
    with pytest.raises(InvalidRole, match="code-embedding"):
        Role.parse("codeembedding")
    with pytest.raises(InvalidPolicy, match="aggregate"):
        Policy.parse("fallback")


def test_routing_state_round_trips_and_refuses_unpinned_cloud_embedding(tmp_path):
    store = RoutingStore(tmp_path)
    store.update({Role.CODE_EMBEDDING: {"policy": "local"}, Role.RERANKER: {"policy": "cloud"}})
    assert store.load().roles[Role.CODE_EMBEDDING].policy is Policy.LOCAL
    store.update({Role.EMBEDDING: {"policy": "cloud", "upstream": "alpha"}})
    assert store.load().roles[Role.EMBEDDING].upstream == "alpha"

    before = store.path.read_text()
    with pytest.raises(ConfigError) as err:
        store.update(
            {
                Role.CODE_EMBEDDING: {"policy": "aggregate"},
                Role.EMBEDDING: {"upstream": None},
                Role.RERANKER: {"policy": "sideways"},
            }
        )
    assert len(err.value.problems) == 3  # every problem listed
    assert store.path.read_text() == before  # nothing written


def test_routing_state_has_no_place_for_a_secret(tmp_path):
    with pytest.raises(ValueError):
        RoutingState.model_validate({"roles": {}, "api_key": "sk-or-v1-x"})
    with pytest.raises(ValueError):
        RoleRoute.model_validate({"policy": "local", "key": "sk-or-v1-x"})
    store = RoutingStore(tmp_path)
    store.save(RoutingState())
    assert "key" not in json.loads(store.path.read_text())
