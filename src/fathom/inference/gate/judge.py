"""How one verdict is reached: pick the reference the policy calls for, embed the probe set
through candidate and reference, and turn the comparison into a `Verdict`; record a space's
golden vectors the first time its reference answers.

`Judge` decides and returns; it persists no verdict, tracks no provider and emits nothing
(`Gate` does, around it). A reference found drifted while judging is handed back to the gate
to quarantine (`quarantine_if_cleared`).

Golden vectors (`Golden`) are the reference's answer to the probes, recorded once per vector
space: when a space's reference encoder is first verified (or, for a sole cloud provider, when
its table is first built) its probe vectors are written and never overwritten for that probe
set. Every later re-probe compares against them, which catches what a live comparison cannot:
a sole pinned upstream that redeploys another quantization behind the same pin, or a
reference that drifts together with everything compared against it. `GoldenStore` keeps one
JSON file per space under `<data_dir>/gate/golden/`, vectors as base64 float32 so they
round-trip exactly (`GoldenVectors` is what any store of them offers); a store refuses to
judge, it only keeps and returns vectors.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from fathom.config import atomic_write_text
from fathom.errors import ConfigError, ProviderError, ProviderUnavailable
from fathom.inference.gate.verdict import (
    Coverage,
    Evidence,
    Verdict,
    VerdictKey,
    VerdictStore,
    inspect,
    verdict_id_for,
)
from fathom.inference.probes import ProbeSet
from fathom.inference.provider import Provider
from fathom.policy import Reference
from fathom.roles import EMBEDDING_ROLES, Role
from fathom.space import Space

log = logging.getLogger(__name__)


# -- golden vectors --------------------------------------------------------------------


@dataclass(frozen=True)
class Golden:
    space: str
    probe_set: str  # digest of the probe set the vectors answer
    probe_ids: tuple[str, ...]
    reference: str  # identity of the encoder that produced them
    recorded_at: float
    vectors: np.ndarray  # (n, width) float32

    @property
    def width(self) -> int:
        return int(self.vectors.shape[1])


class GoldenVectors(Protocol):
    """Where golden vectors live: JSON files (`GoldenStore`), or a PostgreSQL table for a
    multi-server deployment (`fathom.index.pgstore.PgGoldenStore`)."""

    def get(self, space_key: str, probe_set: str | None = None) -> Golden | None: ...

    def put(self, golden: Golden) -> None: ...


class GoldenStore:
    """The golden vectors of each space, one JSON file per space under `folder`."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)

    def _path(self, space_key: str) -> Path:
        return self.folder / f"{space_key}.json"

    def get(self, space_key: str, probe_set: str | None = None) -> Golden | None:
        """The golden vectors of a space, if recorded for this probe set."""
        path = self._path(space_key)
        if not path.exists():
            return None
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
            n, w = d["shape"]
            vec = np.frombuffer(base64.b64decode(d["vectors"]), dtype="<f4").reshape(n, w).copy()
            golden = Golden(
                space=d["space"],
                probe_set=d["probe_set"],
                probe_ids=tuple(d["probe_ids"]),
                reference=d["reference"],
                recorded_at=d["recorded_at"],
                vectors=vec,
            )
        except (ValueError, KeyError, TypeError, OSError) as exc:
            raise ConfigError(f"{path} is not a valid golden vector file: {exc}") from exc
        if probe_set is not None and golden.probe_set != probe_set:
            return None  # recorded for another probe set: never compared across sets
        return golden

    def put(self, golden: Golden) -> None:
        vec = np.ascontiguousarray(golden.vectors, dtype="<f4")
        atomic_write_text(
            self._path(golden.space),
            json.dumps(
                {
                    "space": golden.space,
                    "probe_set": golden.probe_set,
                    "probe_ids": list(golden.probe_ids),
                    "reference": golden.reference,
                    "recorded_at": golden.recorded_at,
                    "shape": list(vec.shape),
                    "vectors": base64.b64encode(vec.tobytes()).decode("ascii"),
                },
                indent=1,
            ),
        )


# -- judging ---------------------------------------------------------------------------


class GateUnavailable(ProviderUnavailable):
    """No verdict could be reached now: the reference (every peer, under `cloud`) or the
    candidate could not answer. Nothing is cleared; try again when they are back."""

    def __init__(
        self, message: str, *, space_key: str, provider_id: str, attempts: dict[str, str] | None = None
    ):
        self.space_key, self.provider_id = space_key, provider_id
        self.attempts = attempts or {}
        super().__init__(message)


def role_for(space: Space) -> Role:
    for role in EMBEDDING_ROLES:
        if role.table == space.table:
            return role
    raise ConfigError(f"space table {space.table!r} is not an embedding table (code or docs)")


def identity(provider: Provider) -> str:
    """How a verdict names its reference: id, model and pin (a re-pinned reference is
    another reference)."""
    i = provider.info
    return f"{i.id}|{i.model}|{i.upstream or '-'}"


class Judge:
    """Reaches verdicts for one gate: its probes, golden store, threshold and live fleet."""

    def __init__(
        self,
        *,
        probes: ProbeSet,
        golden: GoldenVectors,
        verdicts: VerdictStore,
        providers: dict[str, Provider],
        threshold: float,
        now: Callable[[], float],
        is_cleared: Callable[[Space, Provider], bool],
        quarantine_if_cleared: Callable[[Space, Provider, str, Evidence], Awaitable[None]],
    ):
        self.probes, self.golden, self.verdicts = probes, golden, verdicts
        self._providers = providers  # the gate's live fleet, shared (attach/detach change it)
        self.threshold = threshold
        self._now = now
        self.is_cleared = is_cleared
        self._quarantine_if_cleared = quarantine_if_cleared

    def golden_for(self, space: Space) -> Golden | None:
        return self.golden.get(space.key, self.probes.digest)

    async def decide(self, space: Space, candidate: Provider, regime: Reference) -> Verdict:
        started = self._now()
        ids, width = self.probes.ids, space.width
        golden = self.golden_for(space)
        gvec = golden.vectors if golden is not None else None
        is_reference = candidate.id == space.reference

        if is_reference or self._sole_cloud(space, candidate, regime):
            # The space's own reference, or a sole cloud provider with no peer: shape (width,
            # count, finiteness) and the pin, plus the golden vectors once they exist.
            vectors = await self._embed_candidate(space, candidate)
            evidence = inspect(ids, vectors, width, reference=gvec, threshold=self.threshold)
            if regime is Reference.CLOUD and not self.cloud_peers(space, candidate):
                coverage, ref_identity = Coverage.REDUCED, "none: sole cloud provider"
            else:
                coverage, ref_identity = Coverage.SELF, "self"
            if golden is None and evidence.shape_ok:
                self.record_golden(space, candidate, vectors)
        else:
            reference, ref_vectors = await self._reference_answer(space, candidate, regime, gvec)
            vectors = await self._embed_candidate(space, candidate)
            evidence = inspect(ids, vectors, width, reference=ref_vectors, threshold=self.threshold)
            coverage, ref_identity = Coverage.FULL, identity(reference)
            if golden is None:
                self.record_golden(space, reference, ref_vectors)

        key = VerdictKey(
            space=space.key,
            table=space.table,
            provider_id=candidate.id,
            model=candidate.info.model,
            upstream=candidate.info.upstream,
            regime=regime,
            reference=ref_identity,
            width=width,
        )
        decided = self._now()
        passed = evidence.passed
        vid, attempt = verdict_id_for(key, decided), 0
        while self.verdicts.get(vid) is not None:  # same key decided twice in one clock tick
            attempt += 1
            vid = verdict_id_for(key, decided, attempt)
        return Verdict(
            key=key,
            verdict_id=vid,
            passed=passed,
            coverage=coverage,
            reason=evidence.reason(),
            evidence=evidence,
            probe_set=self.probes.digest,
            decided_at=decided,
            elapsed_s=max(0.0, decided - started),
            last_good_check=decided if passed else None,
            golden_compared=gvec is not None,
        )

    async def _embed_candidate(self, space: Space, candidate: Provider) -> Any:
        try:
            return await candidate.embed(self.probes.texts)
        except ProviderError as exc:
            raise GateUnavailable(
                f"{candidate.id} could not embed the probe set for the {space.table} table "
                f"({type(exc).__name__}); it stays uncleared. Retry when it is reachable.",
                space_key=space.key,
                provider_id=candidate.id,
                attempts={candidate.id: type(exc).__name__},
            ) from exc

    def _reference_order(self, space: Space, candidate: Provider, regime: Reference) -> list[Provider]:
        if regime is Reference.LOCAL:
            ref = self._providers.get(space.reference)
            if ref is None:
                return []
            if ref.info.is_cloud:
                raise ConfigError(
                    f"the {space.table} table's reference {ref.id} is a cloud route, but under "
                    f"local, aggregate and backup the reference must be local: agreement "
                    f"with rows written locally is what is checked. Designate a local encoder."
                )
            return [ref]
        # cloud: the anchor first, then peers already cleared for this space, in id order.
        order: list[Provider] = []
        anchor = self._providers.get(space.reference)
        if anchor is not None and anchor.id != candidate.id:
            order.append(anchor)
        for p in sorted(self.cloud_peers(space, candidate), key=lambda p: p.id):
            if p not in order and self.is_cleared(space, p):
                order.append(p)
        return order

    def cloud_peers(self, space: Space, candidate: Provider) -> list[Provider]:
        """Other pinned cloud providers of the candidate's model serving this table."""
        role = role_for(space)
        return [
            p
            for p in self._providers.values()
            if p.id != candidate.id
            and p.info.is_cloud
            and p.info.upstream
            and p.info.model == candidate.info.model
            and role in p.info.roles
        ]

    def _sole_cloud(self, space: Space, candidate: Provider, regime: Reference) -> bool:
        return regime is Reference.CLOUD and not self.cloud_peers(space, candidate)

    async def _reference_answer(
        self, space: Space, candidate: Provider, regime: Reference, gvec: Any
    ) -> tuple[Provider, Any]:
        attempts: dict[str, str] = {}
        order = self._reference_order(space, candidate, regime)
        for ref in order:
            try:
                answer = await ref.embed(self.probes.texts)
            except ProviderError as exc:
                attempts[ref.id] = f"could not answer ({type(exc).__name__})"
                continue  # the anchor is down: fail over to the next peer
            own = inspect(self.probes.ids, answer, space.width, reference=gvec, threshold=self.threshold)
            if not own.passed:
                # A reference that no longer matches the table's golden vectors would pass
                # anything drifted the same way; it judges nobody.
                attempts[ref.id] = f"disagrees with the golden vectors ({own.reason()})"
                await self._quarantine_if_cleared(space, ref, f"reference drift: {own.reason()}", own)
                continue
            return ref, answer
        wanted = (
            f"the designated local reference {space.reference}"
            if regime is Reference.LOCAL
            else f"the cloud anchor {space.reference} or a cleared peer"
        )
        tried = "; ".join(f"{k}: {v}" for k, v in attempts.items()) or "none is connected"
        raise GateUnavailable(
            f"cannot judge {candidate.id} for the {space.table} table: {wanted} must answer the "
            f"probes first ({tried}). Nothing is cleared until a reference answers.",
            space_key=space.key,
            provider_id=candidate.id,
            attempts=attempts,
        )

    def record_golden(self, space: Space, encoder: Provider, vectors: Any) -> None:
        self.golden.put(
            Golden(
                space=space.key,
                probe_set=self.probes.digest,
                probe_ids=tuple(self.probes.ids),
                reference=identity(encoder),
                recorded_at=self._now(),
                vectors=np.asarray(vectors, dtype=np.float32),
            )
        )
        log.info("gate: golden vectors recorded for %s from %s", space.key, encoder.id)
