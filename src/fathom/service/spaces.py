"""Spaces as a use case: which encoder defines each table, which one encodes its queries, and
which providers may write it.

What it owns: the space a new build of a table gets under its role's current policy (the
in-process encoder's, a local provider serving the chosen model, or the cloud anchor's), the
query encoder of a built table (its recorded reference, a table of an earlier embedding
model's encoder, or another provider the gate cleared for the same space), the provenance a
provider's rows carry, the gate's check of every provider that could serve a table
(`verify_providers`), and the router's clearance (`may_write`: the gate's, with
the embedded encoder stepping aside for its cleared quantized writer).

It is handed exactly what it reads, as typed fields: the routing state, the in-process
encoder and its writer, the provider registry, the gate, the earlier models' encoders and
the store as the caller sees it; the router, which reads this clearance, is handed in once
it is built.

What it refuses to do: judge a provider itself (the gate does), route or embed (the router
and the providers do), or store anything (the gate keeps verdicts, the routing state the
policies).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from fathom.config import RoutingStore
from fathom.errors import ConfigError, FathomError, NoProviderAvailable
from fathom.index.indexer import space_for
from fathom.index.store import Store, check_table_kind
from fathom.inference.gate import Gate, Verdict
from fathom.inference.gate.core import choose_anchor
from fathom.inference.model_choice import EarlierEncoders
from fathom.inference.provider import Kind, Provider
from fathom.inference.registry import ProviderRegistry
from fathom.inference.router import Router
from fathom.policy import BEHAVIOUR, Policy, Reference
from fathom.roles import Role
from fathom.space import Provenance, Space

log = logging.getLogger("fathom.service")

# Which embedding role writes (and encodes the queries of) each table.
ROLE_OF_TABLE = {"code": Role.CODE_EMBEDDING, "docs": Role.EMBEDDING}


def _cloud_width(anchor: Provider, set_width: int | None, table: str, role: Role) -> int:
    """The width of a table a cloud anchor defines: the anchor's own, or the one the role sets."""
    width = anchor.info.width or set_width
    if width is None:
        raise ConfigError(
            f"the width of the {table} table is unknown: the cloud anchor {anchor.id} "
            f"reports none and the {role} role sets none; set it with `fathom policy "
            f"set {role} --width N`"
        )
    return width


@dataclass(kw_only=True, eq=False)
class Spaces:
    """Each table's space, query encoder and writers, over the parts the composition root
    hands it."""

    routing: RoutingStore
    encoder: Provider  # the in-process encoder: the default reference of every table
    writer: Provider | None  # its quantized copy (FATHOM_LOCAL_QUANTIZED), when set
    registry: ProviderRegistry
    gate: Gate
    earlier: EarlierEncoders  # tables of earlier embedding models, until rebuilt
    open_store: Callable[[], Store]  # the store as the current caller may see it (`scope`)
    # The router reads `may_write`, so it is built after this and handed in (`Fathom`);
    # only the gate's check of a table's providers reads it.
    router: Router = field(init=False)

    def __post_init__(self) -> None:
        self._gate_clears = self.gate.for_router(self._current_space)

    def may_write(self, role: Role, provider: Provider) -> bool:
        """The router's clearance: the gate's, except that the embedded encoder steps aside
        for its quantized writer wherever the gate cleared that one and it is available. Both
        run on the same cores, so two of them pulling at once would only share them; the
        reference still encodes every query and judges the writer."""
        if not self._gate_clears(role, provider):
            return False
        writer = self.writer
        if writer is not None and provider is self.encoder and self.registry.available(writer.id):
            return not self._gate_clears(role, writer)
        return True

    def _current_space(self, role: Role) -> Space | None:
        try:  # a role that writes no table has no space
            return self.space(role.table) if role.table else None
        except FathomError:
            return None

    def space(self, table: str) -> Space:
        """The space a new build of `table` gets under the role's current policy: the local
        encoder's under local/aggregate/backup (agreement with local rows is the property);
        under `cloud` no local vector is written, so the deterministic cloud anchor's."""
        check_table_kind(table)
        role = ROLE_OF_TABLE[table]
        route = self.routing.load().roles[role]
        if BEHAVIOUR[route.policy].reference is Reference.LOCAL:
            if not route.model or route.model == self.encoder.info.model:
                return space_for(self.encoder, table)
            # The operator chose another model for this table: its reference is the local
            # provider (a sidecar) serving that model, the smallest id so every server agrees.
            locals_ = self._local_references(role, route.model)
            if not locals_:
                raise NoProviderAvailable(
                    f"role {role} is set to model {route.model}, but no local provider serving "
                    f"it is connected: join a sidecar serving {route.model}, or set the role's "
                    f"model back to {self.encoder.info.model}"
                )
            return space_for(locals_[0], table)
        clouds = self.registry.list(role, kind=Kind.CLOUD)
        model = route.model or (clouds[0].info.model if clouds else None)
        anchor = self.registry.get(choose_anchor(clouds, model, role) or "") if model else None
        if anchor is None:
            raise NoProviderAvailable(
                f"role {role} is under policy cloud but no pinned cloud route for "
                f"{model or 'its model'} is connected: join a sidecar with the key pushed, or "
                f"set `fathom policy set {role} --policy local`"
            )
        return Space(
            table=table,
            model=anchor.info.model,
            reference=anchor.id,
            width=_cloud_width(anchor, route.width, table, role),
        )

    def _local_references(self, role: Role, model: str) -> list[Provider]:
        return [
            p for p in self.registry.list(role, kind=Kind.LOCAL) if p.info.model == model and p.info.width
        ]

    def reference_problem(self, role: Role, policy: Policy, model: str | None) -> str | None:
        """Why no reference could judge `role`'s table under `policy` with `model`, or None.
        Under local, aggregate and backup the reference is local: the in-process encoder, or a
        connected local provider serving the model. `policy set` asks before it writes, so a
        change that would break every build of the table is refused, not stored."""
        if role not in ROLE_OF_TABLE.values() or BEHAVIOUR[policy].reference is not Reference.LOCAL:
            return None
        if not model or model == self.encoder.info.model or self._local_references(role, model):
            return None
        return (
            f"{role}: no local encoder serves model {model}, and under policy {policy} the "
            f"{role.table} table's reference must be local: join a sidecar serving {model} "
            f"first, use policy cloud, or keep model {self.encoder.info.model}"
        )

    def encoder_for(self, table: str, project: str | None = None) -> Provider:
        """The encoder of `project`'s `table` queries: the table's own reference encoder, as
        recorded in its space; under a cloud reference that cannot answer, another provider the
        gate cleared for the same space (never an unjudged one)."""
        check_table_kind(table)
        space = self.open_store().space_of(project, table) if project else None
        return self.encoder if space is None or project is None else self.encoder_in(space, project)

    def encoder_in(self, space: Space, project: str) -> Provider:
        """The encoder of queries against `project`'s table of `space`, the space as the
        caller read it (`encoder_for` reads it from the project's pointer)."""
        table = space.table
        if space.reference == self.encoder.id:
            return self.encoder
        if (earlier := self.earlier.for_space(space)) is not None:
            return earlier  # a table an earlier embedding model built, until it is rebuilt
        role = ROLE_OF_TABLE[table]
        reference = self.registry.get(space.reference)
        candidates = ([reference] if reference is not None else []) + [
            p for p in self.registry.list(role) if p.id != space.reference
        ]
        for p in candidates:
            if self.registry.available(p.id) and self.gate.is_cleared(space, p):
                return p
        raise NoProviderAvailable(
            f"the {table} table of {project} was built by {space.reference}, which is not "
            f"connected, and no other provider is cleared for its space: reconnect it, or "
            f"re-index the project with `fathom index PATH --full`"
        )

    def provenance(self, provider: Provider, space: Space) -> Provenance:
        verdict = self.gate.verdict_for(space, provider)
        return Provenance(provider.id, verdict.verdict_id if verdict is not None else None)

    async def verify_providers(self, table: str) -> list[Verdict]:
        """Judge, for the table's current space, every provider that could serve its role and
        has no verdict yet, or owes a re-probe (the reference first: it records the golden
        vectors). A refusal is recorded, not raised: the router simply never lets that
        provider pull."""
        role = ROLE_OF_TABLE[table]
        space = self.space(table)
        policy = self.routing.load().roles[role].policy
        reference = self.registry.get(space.reference) or self.encoder

        def allowed(p: Provider) -> bool:
            return self.router.cloud_allowed(role) if p.info.is_cloud else self.router.behaviour(role).local

        others = [p for p in self.registry.list(role) if p.id != reference.id and allowed(p)]
        verdicts = []
        for p in [reference, *others]:
            if self.gate.verdict_for(space, p) is not None and not self.gate.awaiting_reprobe(p):
                continue  # judged, and no re-probe owed (after a reconnect or restart)
            try:
                verdicts.append(await self.gate.verify(space, p, policy))
            except FathomError as exc:
                # An unpinned embedding route, or its reference could not answer: uncleared.
                log.warning("gate: %s not verified for the %s table: %s", p.id, table, exc)
        writer = self.writer
        refused = self.gate.verdict_for(space, writer) if writer is not None else None
        if writer is not None and refused is not None and not refused.cleared:
            log.warning(
                "gate: FATHOM_LOCAL_QUANTIZED asks for %s, but the gate refused it for the "
                "%s table (%s); the reference %s writes it instead. Unset "
                "FATHOM_LOCAL_QUANTIZED to stop the check (or try int8 if int8-all was "
                "refused)",
                writer.id,
                table,
                refused.reason,
                reference.id,
            )
        return verdicts
