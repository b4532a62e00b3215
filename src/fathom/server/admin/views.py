"""How the admin API shows the parts' state: a verdict with its evidence, the budget, the
fleet, an index job. Plain fields for JSON; nothing here decides or changes anything.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fathom.fleet.hub import Hub


def iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="seconds")


def verdict_view(v: Any) -> dict[str, Any]:
    """A verdict with its evidence, in plain fields. Reduced coverage is flagged and explained."""
    from fathom.inference.gate import Coverage

    k, e = v.key, v.evidence
    reduced = v.coverage is Coverage.REDUCED
    return {
        "verdict_id": v.verdict_id,
        "table": k.table,
        "space": k.space,
        "provider": k.provider_id,
        "model": k.model,
        "upstream": k.upstream,
        "regime": k.regime.value,
        "reference": k.reference.split("|")[0],
        "width": k.width,
        "status": v.status.value,
        "cleared": v.cleared,
        "coverage": v.coverage.value,
        "reduced_coverage": reduced,
        "coverage_note": (
            "reduced coverage: sole cloud provider, no peer to compare with; only the width and the "
            "upstream pin are checked, and periodic re-probes against the golden vectors watch for "
            "drift behind the pin"
        )
        if reduced
        else None,
        "min_cosine": e.min_cosine,
        "threshold": e.threshold,
        "cosines": dict(e.cosines),
        "failing": dict(e.failing),
        "widths_seen": list(e.widths_seen),
        "count_ok": e.count_ok,
        "finite_ok": e.finite_ok,
        "reason": v.reason,
        "status_line": v.status_line(),
        "decided_at": iso(v.decided_at),
        "last_good_check": iso(v.last_good_check),
        "revoked_at": iso(v.revoked_at),
        "revoked_reason": v.revoked_reason,
        "golden_compared": v.golden_compared,
    }


def budget_view(budget: Any) -> dict[str, Any]:
    s = budget.state()
    last = s.last_throttle
    cooldown = round(s.cooldown_remaining_s, 3)
    return {
        "ceiling_source": s.ceiling_source,
        "ceiling": s.ceiling,
        "ceiling_origin": s.ceiling_origin,
        "override": s.ceiling if s.ceiling_source == "override" else None,
        "effective": s.effective_limit,
        "in_flight": s.in_flight,
        "peak_in_flight": s.peak_in_flight,
        "waiting": dict(s.waiting),
        "window": {
            "armed": s.window_armed,
            "count": s.window_count,
            "allowance": s.window_allowance,
            "seconds": s.window_s,
        },
        "trusted_rpm": s.trusted_rpm,
        "rpm_trust": s.rpm_trust,
        "cooldown_left_s": cooldown,
        "in_cooldown": cooldown > 0,
        "last_429": None
        if last is None
        else {
            "kind": last.kind,
            "retry_after_s": last.retry_after_s,
            "ago_s": round(last.ago_s, 3),
            "halved": last.halved,
        },
        "rtt_s": round(s.rtt_s, 4),
        "rtt_measured": s.rtt_measured,
        "granted_total": s.granted_total,
        "throttled_total": dict(s.throttled_total),
        "halvings": s.halvings,
    }


def fleet_view(hub: Hub) -> dict[str, Any]:
    last = hub.last_push()
    return {
        "sidecars": [s.to_dict() for s in hub.sidecars()],
        "problems": hub.problems(),
        "last_push": None if last is None else {**last.model_dump(mode="json"), "pushed": last.pushed},
    }


def job_view(job: Any) -> dict[str, Any]:
    out: dict[str, Any] = job.as_dict()
    total = out.get("chunks_total") or 0
    out["percent"] = (
        round(100.0 * out.get("chunks_done", 0) / total, 1)
        if total
        else (100.0 if out["state"] == "done" else 0.0)
    )
    out["finished"] = bool(job.finished)
    report = getattr(job, "report", None)
    if report is not None:
        out["report"] = {
            "files": report.files,
            "chunks": report.chunks,
            "embedded": report.embedded,
            "reused": report.reused,
            "deleted": report.deleted,
            "tables": dict(report.tables),
            "providers": dict(report.providers),
            "elapsed_s": round(report.elapsed_s, 2),
            "skipped": dict(report.skipped),
            "secrets": list(report.secrets),
            "redacted": list(report.redacted),
        }
    return out
