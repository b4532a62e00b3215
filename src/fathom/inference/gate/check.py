"""The comparison itself: do two encoders' answers to the same probes agree?

Pure and synchronous: arrays in, `Evidence` out. It owns the floor (`MIN_COSINE`) and the
shape rules (right count, exactly the table's width, finite values). It refuses to know who
produced the vectors or what to do with the result; the gate decides that.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

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
