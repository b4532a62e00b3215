"""The compatibility gate, the pinning of embedding routes to one upstream, row provenance.

A provider that has not passed the gate never serves a single text: the pool asks
`Gate.is_cleared` before it lets a provider pull work, and the store asks `GateClearance`
before it writes a row. The parts, each beside what uses it most: the comparison with the
`Evidence` every verdict carries, the golden vectors with the judge that records them, the
store's lock with the gate whose decisions it reads:

- `verdict`    the comparison (`inspect`: per-probe cosines, width, count, finiteness, the 0.99
               floor) and the `Evidence` it yields; `Verdict` (keyed by provider, model, pin,
               regime, reference, width) and its store
- `judge`      `Judge`: reference selection per policy and the decision of one verdict; the
               golden vectors (the reference's probe vectors, recorded once per space, that
               every re-check compares against) and their store
- `core`       `Gate`: verify, the watch list, re-probe, quarantine, listeners; and
               `GateClearance`, the store's second lock, which only reads what the gate decided
- `audit`      rows per verdict, suspect rows after a quarantine, and re-embedding them

The probe texts themselves are package data in `fathom.inference.probes`.
"""

from fathom.inference.gate.audit import (
    AuditableStore,
    AuditReport,
    ReembedReport,
    SuspectRows,
    VerdictRows,
    audit,
    reembed,
)
from fathom.inference.gate.core import (
    DEFAULT_RECHECK_INTERVAL_S,
    Gate,
    GateClearance,
    GateEvent,
    GateRefused,
    check_pin,
    choose_anchor,
    raise_if_refused,
)
from fathom.inference.gate.judge import (
    GateUnavailable,
    Golden,
    GoldenStore,
    GoldenVectors,
    identity,
    role_for,
)
from fathom.inference.gate.verdict import (
    MIN_COSINE,
    Coverage,
    Evidence,
    JsonVerdictStore,
    Status,
    Verdict,
    VerdictKey,
    VerdictStore,
    Watched,
    inspect,
    verdict_id_for,
)
from fathom.inference.probes import Probe, ProbeSet, load_probes

__all__ = [
    "AuditReport",
    "AuditableStore",
    "Coverage",
    "DEFAULT_RECHECK_INTERVAL_S",
    "Evidence",
    "Gate",
    "GateClearance",
    "GateEvent",
    "GateRefused",
    "GateUnavailable",
    "Golden",
    "GoldenStore",
    "GoldenVectors",
    "JsonVerdictStore",
    "MIN_COSINE",
    "Probe",
    "ProbeSet",
    "ReembedReport",
    "Status",
    "SuspectRows",
    "Verdict",
    "VerdictKey",
    "VerdictRows",
    "VerdictStore",
    "Watched",
    "audit",
    "check_pin",
    "choose_anchor",
    "identity",
    "inspect",
    "load_probes",
    "raise_if_refused",
    "reembed",
    "role_for",
    "verdict_id_for",
]
