"""The gate's probe set: the one source of truth for what every candidate encoder embeds.

The texts live in `probes.json` next to this module (package data), so the server, the CLI,
the tests and a sidecar all probe with exactly the same bytes. This module only loads and
fingerprints them; it refuses to embed or judge anything (that is the gate's job).

The set deliberately spans what a code search index holds and where serving stacks part ways:
code in several languages, English prose and markdown, Chinese, Turkish and French (a
multilingual model requantized for English drifts there first), a bare identifier, a short
query, and inputs longer than 256 and than 512 tokens (stacks differ at truncation boundaries).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources


@dataclass(frozen=True)
class Probe:
    id: str  # stable name, used in per-probe evidence ("zh-prose: 0.863")
    kind: str  # "code", "prose" or "query"
    language: str
    text: str


@dataclass(frozen=True)
class ProbeSet:
    probes: tuple[Probe, ...]

    @property
    def texts(self) -> list[str]:
        return [p.text for p in self.probes]

    @property
    def ids(self) -> list[str]:
        return [p.id for p in self.probes]

    @property
    def digest(self) -> str:
        """Fingerprint of the exact texts and their order: golden vectors recorded for one
        digest are never compared with probes of another."""
        h = hashlib.sha256()
        for p in self.probes:
            h.update(p.id.encode())
            h.update(b"\x00")
            h.update(p.text.encode("utf-8"))
            h.update(b"\x01")
        return h.hexdigest()[:16]

    def __len__(self) -> int:
        return len(self.probes)


@lru_cache(maxsize=1)
def load_probes() -> ProbeSet:
    """The packaged probe set (read once per process)."""
    raw = resources.files(__package__).joinpath("probes.json").read_text(encoding="utf-8")
    data = json.loads(raw)
    probes = tuple(
        Probe(id=p["id"], kind=p["kind"], language=p["language"], text=p["text"]) for p in data["probes"]
    )
    ids = [p.id for p in probes]
    if len(set(ids)) != len(ids):  # evidence is keyed by id; a duplicate would hide a probe
        raise ValueError(f"probe ids must be unique: {ids}")
    return ProbeSet(probes)
