"""The four routing policies and the one table of their behaviours.

Every other part (router, gate, status output, dashboard) reads `BEHAVIOUR`; none re-derives
what a policy allows. This module decides nothing about live providers.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from fathom.errors import InvalidPolicy, one_of


class Policy(StrEnum):
    LOCAL = "local"
    CLOUD = "cloud"
    AGGREGATE = "aggregate"
    BACKUP = "backup"

    @classmethod
    def parse(cls, value: str | Policy) -> Policy:
        return one_of(cls, value, InvalidPolicy, "policy")


class Reference(StrEnum):
    """Which encoder an embedding table is checked against by the compatibility gate."""

    LOCAL = "local-ref"  # agreement with rows already written locally is the property
    CLOUD = "cloud-ref"  # no local vector is ever written; another cloud provider is the peer


@dataclass(frozen=True)
class Behaviour:
    local: bool  # local GPUs / sidecars may serve
    cloud: bool  # OpenRouter routes may serve
    cloud_reserve_only: bool  # cloud serves only while no local provider can
    reference: Reference
    summary: str

    @property
    def cloud_capable(self) -> bool:
        return self.cloud


BEHAVIOUR: dict[Policy, Behaviour] = {
    Policy.LOCAL: Behaviour(
        local=True,
        cloud=False,
        cloud_reserve_only=False,
        reference=Reference.LOCAL,
        summary="local GPUs and sidecar hosts only; nothing leaves the network",
    ),
    Policy.CLOUD: Behaviour(
        local=False,
        cloud=True,
        cloud_reserve_only=False,
        reference=Reference.CLOUD,
        summary="OpenRouter only; no GPU needed",
    ),
    Policy.AGGREGATE: Behaviour(
        local=True,
        cloud=True,
        cloud_reserve_only=False,
        reference=Reference.LOCAL,
        summary="local and cloud in one fan-out pool pulling from the same queue",
    ),
    Policy.BACKUP: Behaviour(
        local=True,
        cloud=True,
        cloud_reserve_only=True,
        reference=Reference.LOCAL,
        summary="local first; cloud held in reserve while no local provider can serve",
    ),
}

DEFAULT_POLICY = Policy.AGGREGATE
