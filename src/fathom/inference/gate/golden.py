"""Golden vectors: the reference's answer to the probes, recorded once per vector space.

When a space's reference encoder is first verified (or, for a sole cloud provider, when its
table is first built) its probe vectors are written here and never overwritten for that probe
set. Every later re-probe compares against them, which catches what a live comparison cannot:
a sole pinned upstream that redeploys another quantization behind the same pin, or a
reference that drifts together with everything compared against it.

One JSON file per space under `<data_dir>/gate/golden/`, vectors as base64 float32 so they
round-trip exactly. This module refuses to judge; it only keeps and returns vectors.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from fathom.config import atomic_write_text
from fathom.errors import ConfigError


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
