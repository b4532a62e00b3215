"""Verdicts: the gate's decisions, their evidence, and where they are kept.

A `Verdict` says whether one provider may write into (and encode queries for) one vector
space, under one reference regime, and why. It is keyed by everything that, if changed, makes
the evidence worthless: the space, the provider id, its model, its upstream pin, the regime
(`local-ref` or `cloud-ref`), the reference's identity and the table width. A changed model or
pin therefore finds no verdict and must be probed again.

Persistence sits behind `VerdictStore` (put / get / all, and the watch list). `JsonVerdictStore`
keeps every verdict ever decided in one JSON file under the data dir, written atomically;
revoked and refused verdicts stay, because rows written under a verdict name it and the audit
must still resolve them. The watch list (`Watched`: which providers are cleared for which space,
and when each was last checked) is kept beside them, so a restarted server knows whom to
re-probe before they write again. Nothing secret is ever in either: ids, model names, pins,
numbers, words.

The comparison a verdict rests on is here too, with the `Evidence` it yields: do two
encoders' answers to the same probes agree? `inspect` is pure and synchronous, arrays in,
`Evidence` out. It owns the floor (`MIN_COSINE`) and the shape rules (right count, exactly the
table's width, finite values). It refuses to know who produced the vectors or what to do with
the result; the judge and the gate decide that.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from fathom.config import atomic_write_text
from fathom.errors import ConfigError
from fathom.policy import Reference
from fathom.space import Space

# -- the comparison --------------------------------------------------------------------

# The floor of the compatibility gate: 0.976 looked right in a spot check and was not
# interchangeable. Strictly greater than this, on every probe.
MIN_COSINE = 0.99


@dataclass(frozen=True)
class Evidence:
    """What one embedding pass through a candidate showed, optionally against a reference."""

    count_expected: int
    count_seen: int
    width_expected: int
    widths_seen: tuple[int, ...]
    finite_ok: bool
    cosines: dict[str, float] = field(default_factory=dict)  # probe id -> cosine; {} if not compared
    threshold: float = MIN_COSINE

    @property
    def count_ok(self) -> bool:
        return self.count_seen == self.count_expected

    @property
    def width_ok(self) -> bool:
        return self.widths_seen == (self.width_expected,)

    @property
    def shape_ok(self) -> bool:
        return self.count_ok and self.width_ok and self.finite_ok

    @property
    def compared(self) -> bool:
        return bool(self.cosines)

    @property
    def min_cosine(self) -> float | None:
        return min(self.cosines.values()) if self.cosines else None

    @property
    def failing(self) -> dict[str, float]:
        """Probes at or below the floor, worst first."""
        bad = {k: v for k, v in self.cosines.items() if not v > self.threshold}
        return dict(sorted(bad.items(), key=lambda kv: kv[1]))

    @property
    def passed(self) -> bool:
        return self.shape_ok and (not self.compared or not self.failing)

    def reason(self) -> str:
        """Plain words: why it failed, or what passed."""
        problems: list[str] = []
        if not self.count_ok:
            problems.append(f"returned {self.count_seen} vectors for {self.count_expected} probes")
        if not self.width_ok:
            seen = ", ".join(str(w) for w in self.widths_seen) or "none"
            problems.append(f"returned width {seen}, the table's width is {self.width_expected}")
        if not self.finite_ok:
            problems.append("returned non-finite values (NaN or infinity)")
        if self.failing:
            worst = ", ".join(f"{k} {v:.4f}" for k, v in list(self.failing.items())[:4])
            problems.append(
                f"minimum cosine {self.min_cosine:.4f} is not above {self.threshold} "
                f"({len(self.failing)} of {len(self.cosines)} probes fail: {worst})"
            )
        if problems:
            return "; ".join(problems)
        if self.compared:
            return (
                f"minimum cosine {self.min_cosine:.4f} > {self.threshold} over "
                f"{len(self.cosines)} probes; width {self.width_expected}"
            )
        return f"{self.count_seen} finite vectors of width {self.width_expected}"

    def to_json(self) -> dict[str, Any]:
        return {
            "count_expected": self.count_expected,
            "count_seen": self.count_seen,
            "width_expected": self.width_expected,
            "widths_seen": list(self.widths_seen),
            "finite_ok": self.finite_ok,
            "cosines": self.cosines,
            "threshold": self.threshold,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Evidence:
        return cls(
            count_expected=d["count_expected"],
            count_seen=d["count_seen"],
            width_expected=d["width_expected"],
            widths_seen=tuple(d["widths_seen"]),
            finite_ok=d["finite_ok"],
            cosines={k: float(v) for k, v in d["cosines"].items()},
            threshold=d.get("threshold", MIN_COSINE),
        )


def rows_of(vectors: Any) -> list[np.ndarray]:
    """A provider's answer as a list of 1-D float64 rows, tolerating a ragged or malformed
    answer: the gate must record what a broken stack returned, not crash on it."""
    if vectors is None:
        return []
    arr = vectors if isinstance(vectors, np.ndarray) else None
    if arr is not None and arr.ndim == 2:
        return [np.asarray(r, dtype=np.float64) for r in arr]
    if arr is not None and arr.ndim == 1:
        return [np.asarray(arr, dtype=np.float64)]
    out = []
    for r in vectors:
        try:
            out.append(np.asarray(r, dtype=np.float64).ravel())
        except (TypeError, ValueError):
            out.append(np.full(1, np.nan))
    return out


def inspect(
    ids: Sequence[str],
    candidate: Any,
    width: int,
    *,
    reference: Any | None = None,
    threshold: float = MIN_COSINE,
) -> Evidence:
    """Check the candidate's answer to the probes `ids` and, with a reference answer, take
    the cosine of every corresponding pair."""
    rows = rows_of(candidate)
    widths = tuple(sorted({int(r.shape[0]) for r in rows}))
    finite = bool(rows) and all(bool(np.all(np.isfinite(r))) for r in rows)
    cosines: dict[str, float] = {}
    shape_ok = len(rows) == len(ids) and widths == (width,) and finite
    if reference is not None and shape_ok:
        ref = rows_of(reference)
        if len(ref) != len(ids) or any(r.shape[0] != width or not np.all(np.isfinite(r)) for r in ref):
            raise ValueError("the reference answer itself is malformed; it cannot judge anyone")
        for pid, a, b in zip(ids, ref, rows):
            cosines[pid] = _cosine(a, b)
    return Evidence(
        count_expected=len(ids),
        count_seen=len(rows),
        width_expected=width,
        widths_seen=widths,
        finite_ok=finite,
        cosines=cosines,
        threshold=threshold,
    )


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 0.0  # a zero vector agrees with nothing
    c = float(np.dot(a, b) / (na * nb))
    return max(-1.0, min(1.0, c)) if math.isfinite(c) else 0.0


# -- verdicts and their store ----------------------------------------------------------


class Coverage(StrEnum):
    FULL = "full"  # compared probe by probe with a live reference encoder
    SELF = "self"  # the space's own reference: shape checked, golden vectors compared or recorded
    REDUCED = "reduced"  # sole cloud provider under `cloud`: width + pin only (plus golden vectors)


class Status(StrEnum):
    CLEARED = "cleared"
    REFUSED = "refused"
    QUARANTINED = "quarantined"  # was cleared, then failed a re-probe: revoked


@dataclass(frozen=True)
class VerdictKey:
    space: str  # Space.key: table, reference model, width, reference provider
    table: str
    provider_id: str
    model: str
    upstream: str | None
    regime: Reference
    reference: str  # the reference encoder's identity ("id|model|pin"), or "self" / "none"
    width: int

    def matches(self, *, space: str, provider_id: str, model: str, upstream: str | None, width: int) -> bool:
        return (self.space, self.provider_id, self.model, self.upstream, self.width) == (
            space,
            provider_id,
            model,
            upstream,
            width,
        )

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["regime"] = self.regime.value
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> VerdictKey:
        return cls(**{**d, "regime": Reference(d["regime"])})


@dataclass(frozen=True)
class Verdict:
    key: VerdictKey
    verdict_id: str
    passed: bool
    coverage: Coverage
    reason: str
    evidence: Evidence
    probe_set: str  # digest of the probe set used
    decided_at: float  # wall-clock epoch seconds
    elapsed_s: float
    last_good_check: float | None  # last time it passed (decision or re-probe)
    revoked_at: float | None = None
    revoked_reason: str | None = None
    golden_compared: bool = False  # whether golden vectors took part in the decision
    revocation: Evidence | None = None  # the failed re-probe that revoked it

    # -- what callers ask ------------------------------------------------------------

    @property
    def cleared(self) -> bool:
        return self.passed and self.revoked_at is None

    @property
    def status(self) -> Status:
        if not self.passed:
            return Status.REFUSED
        return Status.QUARANTINED if self.revoked_at is not None else Status.CLEARED

    @property
    def provider_id(self) -> str:
        return self.key.provider_id

    @property
    def regime(self) -> Reference:
        return self.key.regime

    @property
    def cosines(self) -> dict[str, float]:
        return self.evidence.cosines

    @property
    def min_cosine(self) -> float | None:
        return self.evidence.min_cosine

    @property
    def widths_seen(self) -> tuple[int, ...]:
        return self.evidence.widths_seen

    @property
    def count_ok(self) -> bool:
        return self.evidence.count_ok

    @property
    def finite_ok(self) -> bool:
        return self.evidence.finite_ok

    def status_line(self) -> str:
        """One line for `fathom status` and the dashboard, in plain words."""
        k = self.key
        who = f"{k.provider_id} ({k.model}{' @' + k.upstream if k.upstream else ''})"
        head = f"{k.table} table, {who}: {self.status.value}, {k.regime.value}"
        if self.status is Status.QUARANTINED:
            return f"{head}; revoked: {self.revoked_reason}"
        if self.status is Status.REFUSED:
            return f"{head}; refused: {self.reason}"
        if self.coverage is Coverage.REDUCED:
            return (
                f"{head}, REDUCED COVERAGE: sole cloud provider, no peer to compare with, so only "
                f"the vector width ({k.width}) and the upstream pin ({k.upstream}) are checked. "
                f"A pinned upstream can change its serving stack (e.g. another quantization) "
                f"behind the same pin, and that check cannot see it; periodic re-probes against "
                f"the golden vectors recorded for this table do."
            )
        if self.coverage is Coverage.SELF:
            return f"{head}, the table's reference encoder; {self.reason}"
        return f"{head} against {k.reference.split('|')[0]}; {self.reason}"

    # -- lifecycle -----------------------------------------------------------------------

    def checked_ok(self, at: float) -> Verdict:
        return replace(self, last_good_check=at)

    def revoked(self, at: float, reason: str, evidence: Evidence | None = None) -> Verdict:
        return replace(self, revoked_at=at, revoked_reason=reason, revocation=evidence)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict_id": self.verdict_id,
            "key": self.key.to_json(),
            "passed": self.passed,
            "status": self.status.value,
            "coverage": self.coverage.value,
            "reason": self.reason,
            "min_cosine": self.min_cosine,
            "evidence": self.evidence.to_json(),
            "probe_set": self.probe_set,
            "decided_at": self.decided_at,
            "elapsed_s": self.elapsed_s,
            "last_good_check": self.last_good_check,
            "revoked_at": self.revoked_at,
            "revoked_reason": self.revoked_reason,
            "golden_compared": self.golden_compared,
            "revocation": self.revocation.to_json() if self.revocation else None,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Verdict:
        return cls(
            key=VerdictKey.from_json(d["key"]),
            verdict_id=d["verdict_id"],
            passed=d["passed"],
            coverage=Coverage(d["coverage"]),
            reason=d["reason"],
            evidence=Evidence.from_json(d["evidence"]),
            probe_set=d["probe_set"],
            decided_at=d["decided_at"],
            elapsed_s=d["elapsed_s"],
            last_good_check=d.get("last_good_check"),
            revoked_at=d.get("revoked_at"),
            revoked_reason=d.get("revoked_reason"),
            golden_compared=d.get("golden_compared", False),
            revocation=Evidence.from_json(d["revocation"]) if d.get("revocation") else None,
        )


def verdict_id_for(key: VerdictKey, decided_at: float, attempt: int = 0) -> str:
    """Stable id of one decision: the same key decided again later is another verdict, so rows
    written under a revoked verdict stay distinguishable from rows written after a re-clear."""
    raw = json.dumps(key.to_json(), sort_keys=True) + f"|{decided_at:.6f}|{attempt}"
    return "v-" + hashlib.sha256(raw.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Watched:
    """A provider the gate cleared for a space and keeps re-probing. Persisted, so the watch
    survives a restart: a restarted gate treats every watched provider as unchecked until its
    re-probe against the golden vectors passes."""

    space: Space
    provider_id: str
    last_checked: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "space": asdict(self.space),
            "provider_id": self.provider_id,
            "last_checked": self.last_checked,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Watched:
        return cls(Space(**d["space"]), d["provider_id"], d.get("last_checked"))


class VerdictStore(Protocol):
    """Where verdicts live. JSON file now; a PostgreSQL table for a multi-server deployment."""

    def put(self, verdict: Verdict) -> None:
        """Insert, or replace the verdict with the same `verdict_id` (revocation, last check)."""
        ...

    def get(self, verdict_id: str) -> Verdict | None: ...

    def all(self) -> list[Verdict]:
        """Every verdict ever decided, in decision order (a replaced one keeps its place)."""
        ...

    def watch(self, watched: Watched) -> None:
        """Insert, or replace the entry for the same (space, provider)."""
        ...

    def unwatch(self, space_key: str, provider_id: str) -> None: ...

    def watched(self) -> list[Watched]: ...


class JsonVerdictStore:
    """All verdicts in one JSON file, rewritten atomically on every change."""

    FORMAT = 1

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._verdicts, self._watched = self._read()

    def _read(self) -> tuple[dict[str, Verdict], dict[tuple[str, str], Watched]]:
        if not self.path.exists():
            return {}, {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            items = [Verdict.from_json(v) for v in data["verdicts"]]
            watched = [Watched.from_json(w) for w in data.get("watched", [])]
        except (ValueError, KeyError, TypeError, OSError) as exc:
            # Fail closed: an unreadable file must not read as "no verdicts, start over" for
            # the clearance check (it would refuse everything, which is safe) nor be
            # overwritten silently (it would lose the audit trail).
            raise ConfigError(
                f"{self.path} is not a valid verdict file: {exc}; move it aside to re-verify every provider"
            ) from exc
        return ({v.verdict_id: v for v in items}, {(w.space.key, w.provider_id): w for w in watched})

    def _write(self) -> None:
        # Decision order is kept (a replaced verdict keeps its place): "latest" means last.
        text = json.dumps(
            {
                "format": self.FORMAT,
                "verdicts": [v.to_json() for v in self._verdicts.values()],
                "watched": [w.to_json() for w in self._watched.values()],
            },
            indent=1,
            ensure_ascii=False,
        )
        atomic_write_text(self.path, text)

    def put(self, verdict: Verdict) -> None:
        with self._lock:
            self._verdicts[verdict.verdict_id] = verdict
            self._write()

    def watch(self, watched: Watched) -> None:
        with self._lock:
            self._watched[(watched.space.key, watched.provider_id)] = watched
            self._write()

    def unwatch(self, space_key: str, provider_id: str) -> None:
        with self._lock:
            if self._watched.pop((space_key, provider_id), None) is not None:
                self._write()

    def watched(self) -> list[Watched]:
        return list(self._watched.values())

    def get(self, verdict_id: str) -> Verdict | None:
        return self._verdicts.get(verdict_id)

    def all(self) -> list[Verdict]:
        return list(self._verdicts.values())
