"""The admin HTTP API: everything an operator sees and steers (R1-R7), behind a bearer token.

This module owns the `/admin` routers and their token checks:

- fleet: list, approve, revoke, join/host tokens, probe a route; and the key push (R6);
- policies: the route of every role (policy, model, upstream pin, width, fallback) with the
  providers serving it, and validated changes (every problem listed, nothing written on a
  refusal; an accepted change is pushed to the sidecars without a key);
- gate: verdicts with their evidence, verify a provider now, audit a project, re-embed;
- budget: the cloud budget's state, and the manual override (1-256, or none);
- jobs: start an index job, its live progress, pause, resume, cancel;
- projects: what is indexed, each project's status and live sync (watch) state, turning its
  sync on or off, and dropping a project with everything of it;
- an overview (all of the above at once) for the dashboard's polling.

Every endpoint needs the admin token (`Authorization: Bearer ...`); tokens are kept only as
hashes (`admin.json` under the data dir, or from `FATHOM_ADMIN_TOKEN` at start). `/metrics`
also accepts a scrape-only token (`ScrapeAuth`, `metrics.json`), so a Prometheus server never
holds a token that can push a key or change a policy.

A refusal answers 400 (409 for an action that does not apply to a job's state, 404 for an
unknown name, 503 when a part cannot answer now) with `{"detail": {"message", "problems"}}`:
each problem names what is wrong and the fix.

It refuses to let the OpenRouter key out: `POST /admin/key` parses its body by hand (so a
validation error can never echo the key back the way a framework's 422 echoes input), hands the
key to `Hub.push_config` and returns only who acknowledged. No response of this module carries
a key, and nothing here stores one. It refuses to decide anything itself: the gate judges, the
routing store validates and writes, the budget sizes, the indexer runs; this is their window.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import secrets
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Callable, Literal

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fathom import __version__
from fathom.config import RoleRoute, RoutingState, RoutingStateDamaged, RoutingStore, Settings, atomic_write_text
from fathom.errors import ConfigError, FathomError, JobConflict, PinRequired, UnknownJob
from fathom.fleet.auth import hash_token
from fathom.fleet.hub import Hub
from fathom.fleet.protocol import NAME_PATTERN, describe
from fathom.inference.gate.audit import audit as audit_rows
from fathom.inference.gate.audit import reembed as reembed_rows
from fathom.policy import BEHAVIOUR, Policy
from fathom.service.jobs import IndexJobs
from fathom.server.metrics import provider_health
from fathom.roles import EMBEDDING_ROLES, FallbackMode, Role

log = logging.getLogger("fathom.server.admin")

MAX_KEY_BODY = 64 * 1024
MAX_POLICY_BODY = 64 * 1024
MAX_WIDTH = 16384


# ---------------------------------------------------------------------------- auth


class AdminAuth:
    """Admin bearer tokens, as hashes in `admin.json`."""

    FILENAME = "admin.json"

    def __init__(self, data_dir: Path, *, tokens: tuple[str, ...] = ()):
        self.path = Path(data_dir) / self.FILENAME
        self._hashes: list[str] = []
        if self.path.exists():
            try:
                self._hashes = list(json.loads(self.path.read_text()).get("token_hashes", []))
            except (ValueError, OSError, AttributeError) as exc:
                raise ConfigError(f"{self.path} is not a valid token record; fix or remove it") from exc
        added = [hash_token(t) for t in tokens if hash_token(t) not in self._hashes]
        if added:
            self._hashes += added
            self._save()

    def _save(self) -> None:
        atomic_write_text(self.path, json.dumps({"token_hashes": self._hashes}, indent=2))

    @property
    def configured(self) -> bool:
        return bool(self._hashes)

    PREFIX = "fa"

    def issue(self) -> str:
        token = f"{self.PREFIX}_{secrets.token_urlsafe(32)}"
        self._hashes.append(hash_token(token))
        self._save()
        return token

    def replace(self, token: str | None = None) -> str | None:
        """Rotation: every token known so far stops working. `token` (one the operator set in the
        environment) becomes the only one; without it a fresh one is issued and returned, to be
        shown once."""
        self._hashes = [hash_token(token)] if token else []
        if token:
            self._save()
            return None
        return self.issue()

    def check(self, token: str | None) -> bool:
        if not token:
            return False
        h = hash_token(token)
        return any(hmac.compare_digest(h, x) for x in self._hashes)


class ScrapeAuth(AdminAuth):
    """Scrape-only tokens (`FATHOM_METRICS_TOKEN`): they open `/metrics` and nothing else."""

    FILENAME = "metrics.json"
    PREFIX = "fs"  # (`fm_` is an MCP token's)


def bearer_token(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def unauthorized() -> HTTPException:
    return HTTPException(401, "admin token missing or wrong: send `Authorization: Bearer <admin token>` "
                              "(the token `python -m fathom.server` printed once, or FATHOM_ADMIN_TOKEN)",
                         headers={"WWW-Authenticate": "Bearer"})


def no_token_configured() -> HTTPException:
    return HTTPException(503, "no admin token is configured: set FATHOM_ADMIN_TOKEN, or start "
                              "`python -m fathom.server` once to have one issued")


def admin_dependency(auth: AdminAuth) -> Callable[[Request], None]:
    """The check every admin endpoint depends on."""
    def require_admin(request: Request) -> None:
        if not auth.configured:
            raise no_token_configured()
        if not auth.check(bearer_token(request)):
            raise unauthorized()
    return require_admin


def scrape_dependency(auth: AdminAuth, scrape: ScrapeAuth | None) -> Callable[[Request], None]:
    """`/metrics`: the admin token, or a scrape-only token."""
    def require_scraper(request: Request) -> None:
        token = bearer_token(request)
        if auth.check(token) or (scrape is not None and scrape.check(token)):
            return
        if not auth.configured and not (scrape is not None and scrape.configured):
            raise no_token_configured()
        raise unauthorized()
    return require_scraper


def refusal(status: int, message: str, problems: list[str] | None = None) -> HTTPException:
    """The one shape of a refusal: a message and every problem (each with its fix)."""
    return HTTPException(status, {"message": message, "problems": list(problems or [message])})


def damaged(exc: RoutingStateDamaged) -> HTTPException:
    """A state file the server cannot read: 503 (the request was fine), naming the fix."""
    return refusal(503, str(exc), exc.problems)


def reference_problems(service: Any, state: RoutingState, changes: dict[Role, dict[str, Any]]) -> list[str]:
    """Each changed embedding role whose merged route no reference could judge (a model no
    local encoder serves under a policy whose reference is local)."""
    out = []
    for role, fields in changes.items():
        current = state.roles[role]
        policy = Policy.parse(fields.get("policy", current.policy))
        model = fields["model"] if "model" in fields else current.model
        problem = service.reference_problem(role, policy, model)
        if problem is not None:
            out.append(problem)
    return out


def failure_status(exc: FathomError) -> int:
    """The HTTP status of a typed failure: the caller's mistake is 400, a request the current
    state cannot serve (no provider for the role's model, a locked or damaged project) 409,
    storage that cannot serve now (a full disk, a lost database) 503."""
    from fathom.errors import DiskFull, StoreLost
    from fathom.index.store import DamagedProject, ProjectLocked, UnknownProject

    if isinstance(exc, (UnknownProject, UnknownJob)):
        return 404
    if isinstance(exc, (ProjectLocked, DamagedProject)):
        return 409
    if isinstance(exc, RoutingStateDamaged):
        return 503  # the server's own state file: the request was fine
    if isinstance(exc, ConfigError):
        return 400
    if isinstance(exc, (DiskFull, StoreLost)) or type(exc).__name__ == "StoreUnavailable":
        return 503
    return 409  # the request is fine but conflicts with the state (no provider serves it, ...)


def failure_response(exc: FathomError) -> JSONResponse:
    message = str(exc)
    return JSONResponse(status_code=failure_status(exc),
                        content={"detail": {"message": message, "problems": [message]}})


def describe_body(exc: ValidationError) -> str:
    """Field paths and messages without input values (the key must never be echoed)."""
    return "; ".join(body_problems(exc)[:5]) or describe(exc)


def body_problems(exc: ValidationError | Any) -> list[str]:
    """Each validation error as `field: message`, never with the input value."""
    errors = exc.errors(include_input=False, include_url=False, include_context=False) \
        if isinstance(exc, ValidationError) else exc.errors()
    out = []
    for err in errors:
        loc = ".".join(str(x) for x in err.get("loc", ())) or "body"
        out.append(f"{loc}: {err.get('msg', 'invalid')}")
    return out


# ---------------------------------------------------------------------------- bodies


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, pattern=NAME_PATTERN)


class ProbeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider: str
    texts: list[str] = Field(min_length=1, max_length=16)


class KeyPush(BaseModel):
    """The body of `POST /admin/key`. `repr` hides the key."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    key: str | None = Field(default=None, min_length=8, max_length=512, pattern=r"^\S+$", repr=False)
    roles: dict[str, dict[str, Any]] | None = None
    forget_key: bool = False


class VerifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider: str = Field(min_length=1, max_length=300, description="a live provider id (see GET /admin/policies)")
    table: Literal["code", "docs"] | None = Field(
        default=None, description="the table to verify it for; default: every table its roles write")
    force: bool = Field(default=False, description="probe again even when a verdict for it exists")


class ReembedRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    encoder: str | None = Field(default=None, max_length=300,
                                description="a cleared provider id; default: the table's reference encoder")


class BudgetChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    override: int | None = Field(description="permits in flight, 1-256; null removes the override")


MAX_PATH_COMPONENT_BYTES = 255  # NAME_MAX of the file systems a server runs on


def check_server_path(path: str) -> str:
    """A path as the server's file system could hold it, or a ValueError saying why not: no NUL
    or other control character (the OS refuses them, and they hide in logs), and no component
    over 255 bytes (the OS answers ENAMETOOLONG)."""
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise ValueError("the path holds a NUL or another control character; give the folder's path as "
                         "plain text")
    for part in path.split("/"):
        if len(part.encode("utf-8", errors="surrogatepass")) > MAX_PATH_COMPONENT_BYTES:
            raise ValueError(f"a component of the path is over {MAX_PATH_COMPONENT_BYTES} bytes, longer than any "
                             f"file name can be; check the path")
    return path


class JobStart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    path: str = Field(min_length=1, max_length=4096, description="absolute path of the project folder, on the server")
    project: str = Field(min_length=1, max_length=200)
    full: bool = Field(default=False, description="rebuild in a shadow table instead of an incremental run")

    @field_validator("path")
    @classmethod
    def _path(cls, path: str) -> str:
        return check_server_path(path)


class WatchChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(description="whether the project's index follows its files (live sync)")


class SearchRequest(BaseModel):
    """The dashboard's search box: the same search as the MCP tools `search_code` / `search_docs`."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=2000, description="words or an identifier")
    project: str | None = Field(None, max_length=200, description="one project (default: every project)")
    table: Literal["code", "docs"] = Field("code", description="code (search_code) or docs (search_docs)")
    k: int = Field(10, ge=1, le=50, description="how many hits")


ROUTE_FIELDS = ("policy", "model", "upstream", "width", "fallback")
_ROLE_CHANGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "policy": {"type": "string", "enum": [p.value for p in Policy]},
        "model": {"anyOf": [{"type": "string", "minLength": 1, "maxLength": 200}, {"type": "null"}]},
        "upstream": {"anyOf": [{"type": "string", "minLength": 1, "maxLength": 100}, {"type": "null"}],
                     "description": "the OpenRouter upstream pin (required for a cloud embedding route)"},
        "width": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_WIDTH}, {"type": "null"}]},
        "fallback": {"type": "string", "enum": [f.value for f in FallbackMode]},
    },
}
POLICY_BODY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {r.value: _ROLE_CHANGE_SCHEMA for r in Role},
    "example": {"code-embedding": {"policy": "aggregate", "upstream": "alpha"}, "rlm": {"policy": "local"}},
}


# ---------------------------------------------------------------------------- policies


def check_policy_changes(body: Any, state: RoutingState, *, table_widths: dict[str, dict[int, list[str]]],
                         reference_widths: dict[str, int]) -> tuple[dict[Role, dict[str, Any]], list[str]]:
    """Validate a `PUT /admin/policies` body against the stored state; returns the changes and
    every problem found (all of them, so one refusal lists everything to fix).

    `table_widths` is, per table, the width of each existing table and the projects holding it;
    `reference_widths` the width of each table's reference encoder (what a table not built yet
    will have). The rules on a merged route (a cloud-capable embedding route needs a pin, a
    model is set) are `RoutingState.problems`: one source of truth with `RoutingStore.update`.
    """
    if not isinstance(body, dict):
        return {}, ['the body must be a JSON object {role: {field: value}}, e.g. {"rlm": {"policy": "local"}}']
    if not body:
        return {}, ['nothing to change: give at least one role, e.g. {"rlm": {"policy": "local"}}']
    problems: list[str] = []
    changes: dict[Role, dict[str, Any]] = {}
    trial = state.model_copy(deep=True)
    for name, fields in body.items():
        try:
            role = Role.parse(name)
        except ConfigError as exc:
            problems.append(str(exc))
            continue
        if not isinstance(fields, dict) or not fields:
            problems.append(f'{role}: give an object with one or more of {", ".join(ROUTE_FIELDS)}, '
                            f'e.g. {{"policy": "local"}}')
            continue
        per_field = _field_problems(role, fields, table_widths, reference_widths)
        problems += [p for found in per_field.values() for p in found]
        # The fields that are fine on their own still go through the merged-route rules, so a
        # bad width does not hide a missing pin: one refusal lists everything to fix.
        sound = {k: v for k, v in fields.items() if k in ROUTE_FIELDS and not per_field.get(k)}
        try:
            trial.roles[role] = RoleRoute.model_validate(trial.roles[role].model_dump() | sound)
        except ValidationError as exc:
            problems += [f"{role}: {p}" for p in body_problems(exc)]
            continue
        changes[role] = dict(fields)
    problems += trial.problems(changes.keys())
    return (changes if not problems else {}), problems


def _field_problems(role: Role, fields: dict[str, Any], table_widths: dict[str, dict[int, list[str]]],
                    reference_widths: dict[str, int]) -> dict[str, list[str]]:
    """Per field, what is wrong with it on its own (empty lists for sound fields)."""
    out: dict[str, list[str]] = {key: [] for key in fields}
    for key in fields:
        if key not in ROUTE_FIELDS:
            out[key].append(f"{role}: unknown field {key!r}; the fields are {', '.join(ROUTE_FIELDS)}")
    if "policy" in fields:
        try:
            Policy.parse(fields["policy"])
        except ConfigError as exc:
            out["policy"].append(f"{role}: {exc}")
    if "fallback" in fields and fields["fallback"] not in [f.value for f in FallbackMode]:
        out["fallback"].append(f"{role}: unknown fallback {fields['fallback']!r}: use "
                               + " or ".join(f.value for f in FallbackMode))
    for key, limit in (("model", 200), ("upstream", 100)):
        if key in fields and fields[key] is not None:
            v = fields[key]
            if not isinstance(v, str) or not v.strip() or len(v) > limit or re.search(r"\s", v):
                out[key].append(f"{role}: {key} must be a name of 1-{limit} characters without spaces, or null"
                                + (" to remove the pin" if key == "upstream" else ""))
    if "width" in fields:
        out["width"] += _width_problems(role, fields["width"], table_widths, reference_widths)
    return out


def _width_problems(role: Role, w: Any, table_widths: dict[str, dict[int, list[str]]],
                    reference_widths: dict[str, int]) -> list[str]:
    if role not in EMBEDDING_ROLES:
        return [f"{role}: a {role} route writes no table, so it has no width; drop `width`"]
    if w is None:
        return []
    if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= MAX_WIDTH:
        return [f"{role}: width must be a whole number from 1 to {MAX_WIDTH}, got {w!r}"]
    out = []
    table = role.table or ""
    existing = table_widths.get(table, {})
    for have, projects in sorted(existing.items()):
        if have != w:
            names = ", ".join(sorted(projects)[:5]) + (" ..." if len(projects) > 5 else "")
            out.append(f"{role}: width {w} does not match the {table} table's width {have} "
                       f"(project {names}); a table is one vector space of one width: keep "
                       f"{have}, or re-index into a new table with an encoder of width {w}")
    ref = reference_widths.get(table)
    if not existing and ref is not None and ref != w:
        out.append(f"{role}: width {w} does not match the {table} table's reference encoder "
                   f"({ref}-d), which defines the table; keep {ref}, or configure a {w}-d "
                   f"reference encoder (FATHOM_LOCAL_MODEL_PATH and FATHOM_LOCAL_WIDTH)")
    return out


# ---------------------------------------------------------------------------- budget record


class BudgetRecord:
    """The operator's budget override, in `budget.json`, so a restart keeps it. Only a number."""

    FILENAME = "budget.json"

    def __init__(self, data_dir: Path):
        self.path = Path(data_dir) / self.FILENAME

    def load(self) -> int | None:
        try:
            value = json.loads(self.path.read_text()).get("override")
        except FileNotFoundError:
            return None
        except (ValueError, OSError, AttributeError) as exc:
            raise ConfigError(f"{self.path} is not a valid budget record: {exc}; fix or remove it") from exc
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def save(self, override: int | None) -> None:
        atomic_write_text(self.path, json.dumps({"override": override}))


# ---------------------------------------------------------------------------- jobs


def job_view(job: Any) -> dict[str, Any]:
    out = job.as_dict()
    total = out.get("chunks_total") or 0
    out["percent"] = round(100.0 * out.get("chunks_done", 0) / total, 1) if total else (
        100.0 if out["state"] == "done" else 0.0)
    out["finished"] = bool(job.finished)
    report = getattr(job, "report", None)
    if report is not None:
        out["report"] = {"files": report.files, "chunks": report.chunks, "embedded": report.embedded,
                         "reused": report.reused, "deleted": report.deleted, "tables": dict(report.tables),
                         "providers": dict(report.providers), "elapsed_s": round(report.elapsed_s, 2),
                         "skipped": dict(report.skipped), "secrets": list(report.secrets)}
    return out


# ---------------------------------------------------------------------------- views


def iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="seconds")


def verdict_view(v: Any) -> dict[str, Any]:
    """A verdict with its evidence, in plain fields. Reduced coverage is flagged and explained."""
    from fathom.inference.gate import Coverage

    k, e = v.key, v.evidence
    reduced = v.coverage is Coverage.REDUCED
    return {
        "verdict_id": v.verdict_id, "table": k.table, "space": k.space, "provider": k.provider_id,
        "model": k.model, "upstream": k.upstream, "regime": k.regime.value,
        "reference": k.reference.split("|")[0], "width": k.width,
        "status": v.status.value, "cleared": v.cleared, "coverage": v.coverage.value,
        "reduced_coverage": reduced,
        "coverage_note": (
            "reduced coverage: sole cloud provider, no peer to compare with; only the width and the "
            "upstream pin are checked, and periodic re-probes against the golden vectors watch for "
            "drift behind the pin") if reduced else None,
        "min_cosine": e.min_cosine, "threshold": e.threshold,
        "cosines": dict(e.cosines), "failing": dict(e.failing),
        "widths_seen": list(e.widths_seen), "count_ok": e.count_ok, "finite_ok": e.finite_ok,
        "reason": v.reason, "status_line": v.status_line(),
        "decided_at": iso(v.decided_at), "last_good_check": iso(v.last_good_check),
        "revoked_at": iso(v.revoked_at), "revoked_reason": v.revoked_reason,
        "golden_compared": v.golden_compared,
    }


def budget_view(budget: Any) -> dict[str, Any]:
    s = budget.state()
    last = s.last_throttle
    cooldown = round(s.cooldown_remaining_s, 3)
    return {
        "ceiling_source": s.ceiling_source, "ceiling": s.ceiling, "ceiling_origin": s.ceiling_origin,
        "override": s.ceiling if s.ceiling_source == "override" else None,
        "effective": s.effective_limit, "in_flight": s.in_flight, "peak_in_flight": s.peak_in_flight,
        "waiting": dict(s.waiting),
        "window": {"armed": s.window_armed, "count": s.window_count, "allowance": s.window_allowance,
                   "seconds": s.window_s},
        "trusted_rpm": s.trusted_rpm, "rpm_trust": s.rpm_trust,
        "cooldown_left_s": cooldown, "in_cooldown": cooldown > 0,
        "last_429": None if last is None else {
            "kind": last.kind, "retry_after_s": last.retry_after_s, "ago_s": round(last.ago_s, 3),
            "halved": last.halved},
        "rtt_s": round(s.rtt_s, 4), "rtt_measured": s.rtt_measured,
        "granted_total": s.granted_total, "throttled_total": dict(s.throttled_total), "halvings": s.halvings,
    }


def fleet_view(hub: Hub) -> dict[str, Any]:
    last = hub.last_push()
    return {
        "sidecars": [s.to_dict() for s in hub.sidecars()],
        "problems": hub.problems(),
        "last_push": None if last is None else {**last.model_dump(mode="json"), "pushed": last.pushed},
    }


@dataclass
class OperatorParts:
    """The live parts the operator API reads and steers; `create_app` assembles them. A part
    that is None answers 503 "not configured" on its endpoints instead of failing."""

    settings: Settings
    routing: RoutingStore
    hub: Hub
    registry: Any = None
    gate: Any = None
    budget: Any = None
    service: Any = None
    router: Any = None
    jobs: IndexJobs | None = None
    budget_record: BudgetRecord | None = None
    metrics: Any = None
    started_at: float = field(default_factory=time.time)

    def need(self, name: str) -> Any:
        part = getattr(self, name)
        if part is None:
            raise refusal(503, f"the {name} is not configured on this server; start it with "
                               f"`python -m fathom.server` (which builds every part)")
        return part

    # -- policies ----------------------------------------------------------------------

    def cleared_for(self, role: Role, provider: Any) -> bool | None:
        if role not in EMBEDDING_ROLES or self.gate is None or self.service is None:
            return None
        try:
            return bool(self.gate.is_cleared(self.service.space(role.table), provider))
        except FathomError:
            return False

    def policies(self) -> dict[str, Any]:
        from fathom.inference.router import NoRoute

        state = self.routing.load()
        roles: dict[str, Any] = {}
        for role in Role:
            route = state.roles[role]
            behaviour = BEHAVIOUR[route.policy]
            serving: list[str] = []
            unavailable: list[str] = []
            if self.router is not None:
                serving = [p.id for p in self.router.serving(role)]
                if not serving:
                    try:
                        self.router.order(role)
                    except NoRoute as exc:
                        unavailable = list(exc.reasons)
            providers = []
            cloud = getattr(self.hub, "cloud_health", None)
            for p in (self.registry.list(role) if self.registry is not None else []):
                health = self.registry.health(p.id)
                word, up = provider_health(self.registry, p, cloud)
                record = cloud.of(p.id, p.info.host) if cloud is not None and p.info.is_cloud else None
                providers.append({
                    "id": p.id, "kind": p.info.kind.value, "host": p.info.host, "model": p.info.model,
                    "upstream": p.info.upstream, "width": p.info.width,
                    "health": word, "reason": health.reason or (record.advice if record else None),
                    "cloud_health": record.to_dict() if record else None, "up": up,
                    "available": self.registry.available(p.id), "cleared": self.cleared_for(role, p),
                    "permitted": self.router.permits(role, p) if self.router is not None else None,
                    # Eligible by the router, and (a cloud route) seen serving by a real call.
                    "serving": p.id in serving and up,
                })
            reference = self._reference_encoder(role)
            if reference is not None and all(p["id"] != reference.id for p in providers):
                # The service's in-process encoder indexes and encodes queries for the tables
                # directly (it is their reference), whether or not it also joins the registry.
                local_ok = behaviour.local
                providers.insert(0, {
                    "id": reference.id, "kind": reference.info.kind.value, "host": None,
                    "model": reference.info.model, "upstream": None, "width": reference.info.width,
                    "health": "ok", "reason": "the table's reference encoder (in-process)"
                    + ("" if local_ok else f"; policy {route.policy} lets no local provider serve"),
                    "available": True, "cleared": True, "permitted": local_ok, "serving": local_ok})
                if local_ok:
                    serving = [reference.id, *serving]
                    unavailable = []
            roles[role.value] = {
                **route.model_dump(mode="json"), "table": role.table, "stateful": role.stateful,
                "behaviour": behaviour.summary, "reference": behaviour.reference.value if role.stateful else None,
                "cloud_allowed": behaviour.cloud and route.fallback is not FallbackMode.LOCAL_ONLY,
                "serving": serving, "unavailable": unavailable, "providers": providers,
                "warnings": state.problems([role]),
            }
        return {"roles": roles, "policies": {p.value: BEHAVIOUR[p].summary for p in Policy},
                "fallbacks": [f.value for f in FallbackMode]}

    def _reference_encoder(self, role: Role) -> Any:
        if role not in EMBEDDING_ROLES or self.service is None:
            return None
        try:
            return self.service.encoder_for(role.table)
        except FathomError:
            return None

    def table_widths(self) -> tuple[dict[str, dict[int, list[str]]], dict[str, int]]:
        """Blocking (the store): per table, existing widths and their projects; and each
        table's reference encoder width."""
        widths: dict[str, dict[int, list[str]]] = {}
        refs: dict[str, int] = {}
        if self.service is None:
            return widths, refs
        for p in self.service.store.list_projects():
            for table, info in p.tables.items():
                if info.space is not None:
                    widths.setdefault(table, {}).setdefault(int(info.space.width), []).append(p.name)
        for role in EMBEDDING_ROLES:
            try:
                refs[role.table] = int(self.service.space(role.table).width)
            except FathomError:
                pass
        return widths, refs

    # -- gate --------------------------------------------------------------------------

    def verdicts(self, history: bool = False) -> dict[str, Any]:
        from fathom.server.metrics import latest_verdicts

        gate = self.need("gate")
        chosen = gate.verdicts.all() if history else latest_verdicts(gate)
        views = [verdict_view(v) for v in chosen]
        counts = {"cleared": 0, "refused": 0, "quarantined": 0}
        for v in latest_verdicts(gate):
            counts[v.status.value] = counts.get(v.status.value, 0) + 1
        return {"verdicts": views, "counts": counts,
                "reduced_coverage": [v["provider"] for v in views if v["reduced_coverage"] and v["cleared"]]}

    def find_provider(self, pid: str) -> Any:
        seen: list[Any] = list(self.registry) if self.registry is not None else []
        seen += self.hub.providers()
        if self.gate is not None:
            seen += list(self.gate.providers)
        for prov in seen:
            if prov.id == pid:
                return prov
        raise refusal(404, f"no live provider {pid!r}; GET /admin/policies lists the providers serving each role")

    # -- overview ----------------------------------------------------------------------

    def overview(self) -> dict[str, Any]:
        """Every section the dashboard shows; a section whose state cannot be read says why
        (`{"error": {message, problems}}`) and the others are still there."""
        fleet = fleet_view(self.hub)
        try:
            policies: dict[str, Any] = self.policies()
        except RoutingStateDamaged as exc:
            policies = {"error": {"message": str(exc), "problems": exc.problems}}
        out: dict[str, Any] = {
            "version": __version__, "uptime_s": round(time.time() - self.started_at, 1),
            "policies": policies, "fleet": fleet,
            "gate": self.verdicts() if self.gate is not None else None,
            "budget": budget_view(self.budget) if self.budget is not None else None,
            "jobs": [job_view(j) for j in self.jobs.all()] if self.jobs is not None else [],
        }
        problems = list(fleet["problems"])
        if self.jobs is not None and self.jobs.problem:
            problems.append(self.jobs.problem)
        if "error" in policies and policies["error"]["message"] not in problems:
            problems.append(policies["error"]["message"])
        for role, r in policies.get("roles", {}).items():
            if not r["serving"]:
                problems.append(f"role {role} has no provider serving it"
                                + (f": {'; '.join(r['unavailable'])}" if r["unavailable"] else ""))
        if out["gate"]:
            problems += [f"gate quarantined {v['provider']} for the {v['table']} table: {v['revoked_reason']}"
                         for v in out["gate"]["verdicts"] if v["status"] == "quarantined"]
        out["problems"] = problems
        return out


# ---------------------------------------------------------------------------- routers


def admin_router(hub: Hub, auth: AdminAuth, *, registry: Any = None,
                 clock: Callable[[], float] = time.perf_counter) -> APIRouter:
    """The fleet endpoints and the key push."""
    router = APIRouter(prefix="/admin", dependencies=[Depends(admin_dependency(auth))], tags=["fleet"])

    @router.get("/fleet")
    async def fleet() -> dict[str, Any]:
        """Every sidecar (approved, pending, offline) with its health, and the fleet's problems."""
        return fleet_view(hub)

    @router.post("/fleet/{name}/approve")
    async def approve(name: str, rebind: bool = False, pre_approve: bool = False) -> dict[str, Any]:
        """Approve a sidecar, bound to the credential of the host connected under the name now.
        A host claiming a name bound to another host is approved only with `rebind=true` (it
        replaces that host); 409 otherwise. A name no sidecar has connected under is approved
        only with `pre_approve=true` (the first host to connect under it is bound to it), so a
        typo is refused (409) instead of waiting for whoever takes the name."""
        from fathom.fleet.hub import NameClaimed

        known = {s.name for s in hub.sidecars()}
        if not pre_approve and _name(name) not in known and not hub.auth.is_revoked(name):
            raise refusal(409, f"no sidecar named {name!r} has connected to this server", [
                f"no sidecar named {name!r} has connected to this server"
                + (f" (the sidecars: {', '.join(sorted(known))})" if known else "")
                + f"; check the name, or approve it before its first connection with `fathom fleet approve "
                  f"{name} --pre-approve` (the first host to connect under it is bound to it)"])
        try:
            return (await hub.approve(_name(name), rebind=rebind)).to_dict()
        except NameClaimed as exc:
            raise refusal(409, str(exc)) from None

    @router.post("/fleet/{name}/revoke")
    async def revoke(name: str) -> dict[str, Any]:
        return (await hub.revoke(_name(name))).to_dict()

    @router.post("/fleet/tokens")
    async def issue_token(body: TokenRequest | None = None) -> dict[str, Any]:
        """A new join token (no name) or a host token that pre-approves `name`; shown once."""
        name = body.name if body else None
        issued = hub.auth.issue_host_token(name) if name else hub.auth.issue_join_token()
        return {"token": issued.token, "name": issued.name,
                "kind": "host" if name else "join", "note": "shown once; only its hash is kept"}

    @router.post("/fleet/probe")
    async def probe(body: ProbeRequest) -> dict[str, Any]:
        """Embed a few texts through one live provider (a sidecar route, by id): the operator's
        check that a route serves what it claims. Returns the vectors of those texts only."""
        provider = _find_provider(body.provider)
        started = clock()
        try:
            vectors = await provider.embed(body.texts)
        except FathomError as exc:
            raise HTTPException(502, f"{body.provider} failed: {exc}") from None
        return {"provider": provider.id, "model": provider.info.model, "width": int(vectors.shape[1]),
                "ms": round((clock() - started) * 1000, 1), "vectors": vectors.tolist()}

    def _find_provider(pid: str) -> Any:
        candidates = list(registry) if registry is not None else []
        candidates += hub.providers()
        for prov in candidates:
            if prov.id == pid:
                return prov
        raise HTTPException(404, f"no live provider {pid!r}; see GET /admin/fleet for the routes")

    @router.post("/key", openapi_extra={"requestBody": {"required": False, "content": {"application/json": {
        "schema": {"type": "object", "additionalProperties": False, "properties": {
            "key": {"type": "string", "minLength": 8, "maxLength": 512, "writeOnly": True},
            "roles": {"type": "object"}, "forget_key": {"type": "boolean"}}}}}}})
    async def push_key(request: Request) -> dict[str, Any]:
        """Push routing (and optionally the OpenRouter key) to every approved, connected sidecar.
        Returns who acknowledged and who was offline; never the key."""
        raw = await request.body()
        if len(raw) > MAX_KEY_BODY:
            raise HTTPException(413, "body too large")
        try:
            body = KeyPush.model_validate_json(raw or b"{}")
        except ValidationError as exc:
            raise HTTPException(400, f"invalid key push: {describe_body(exc)}") from None
        finally:
            del raw
        try:
            roles = {Role.parse(r): fields for r, fields in (body.roles or {}).items()}
            outcome = await hub.push_config(roles or None, body.key, forget_key=body.forget_key)
        except RoutingStateDamaged as exc:
            raise damaged(exc) from None
        except ConfigError as exc:
            raise HTTPException(400, {"message": str(exc), "problems": exc.problems}) from None
        finally:
            del body  # the last reference this handler holds to the key
        return outcome.to_dict()

    return router


def operator_router(parts: OperatorParts, auth: AdminAuth) -> APIRouter:
    """Policies, gate, budget, jobs and the overview."""
    router = APIRouter(prefix="/admin", dependencies=[Depends(admin_dependency(auth))])

    # -- policies ----------------------------------------------------------------------

    @router.get("/policies", tags=["policies"])
    async def get_policies() -> dict[str, Any]:
        """Per role: policy, model, upstream pin, width, fallback, and the providers serving it."""
        return parts.policies()

    @router.put("/policies", tags=["policies"], openapi_extra={"requestBody": {
        "required": True, "content": {"application/json": {"schema": POLICY_BODY_SCHEMA}}}})
    async def put_policies(request: Request) -> dict[str, Any]:
        """Change roles' routes: `{role: {policy?, model?, upstream?, width?, fallback?}}`.

        Validated before any write: unknown role or policy, an embedding role without a pin
        under a cloud-capable policy, a width that does not match the table. A refusal (400)
        lists every problem and writes nothing. An accepted change is stored, then pushed to
        every approved sidecar (without a key: they keep the key they hold)."""
        raw = await request.body()
        if len(raw) > MAX_POLICY_BODY:
            raise refusal(413, "body too large")
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            raise refusal(400, "the body is not JSON: send {role: {field: value}}") from None
        try:
            state = parts.routing.load()
            widths, refs = await asyncio.to_thread(parts.table_widths)
        except ConfigError as exc:
            raise refusal(503, str(exc), exc.problems) from None
        changes, problems = check_policy_changes(body, state, table_widths=widths, reference_widths=refs)
        if parts.service is not None:
            problems += reference_problems(parts.service, state, changes)
        if problems:
            raise refusal(400, f"policy change refused ({len(problems)} problem"
                               f"{'s' if len(problems) != 1 else ''}); nothing was written", problems)
        try:
            outcome = await parts.hub.push_config(changes)
        except ConfigError as exc:
            raise refusal(400, "policy change refused; nothing was written", exc.problems) from None
        log.info("policies changed by the operator: %s", ", ".join(
            f"{r}: {', '.join(f'{k}={v}' for k, v in f.items())}" for r, f in changes.items()))
        view = parts.policies()
        return {"applied": {r.value: view["roles"][r.value] for r in changes}, "push": outcome.to_dict(),
                "roles": view["roles"]}

    # -- gate --------------------------------------------------------------------------

    @router.get("/gate/verdicts", tags=["gate"])
    async def get_verdicts(history: bool = False) -> dict[str, Any]:
        """The latest verdict per provider and space (every verdict ever with `history=true`),
        with evidence: per-probe cosines, minimum, regime, coverage."""
        return parts.verdicts(history)

    @router.post("/gate/verify", tags=["gate"])
    async def verify(body: VerifyRequest) -> dict[str, Any]:
        """Probe a live provider now for a table (or every table its roles write), under the
        role's current policy. Answers the verdicts, cleared or refused, with their evidence."""
        from fathom.inference.gate import GateUnavailable

        gate, service = parts.need("gate"), parts.need("service")
        provider = parts.find_provider(body.provider)
        roles = [r for r in EMBEDDING_ROLES if r in provider.info.roles]
        if body.table is not None:
            roles = [r for r in roles if r.table == body.table]
        if not roles:
            what = f"the {body.table} table" if body.table else "any table"
            raise refusal(400, f"{provider.id} serves no embedding role for {what}; the gate judges "
                               f"embedding routes only (rerank and chat write nothing)")
        state = parts.routing.load()
        out = []
        for role in sorted(roles, key=lambda r: r.table or ""):
            try:
                space = service.space(role.table)
                verdict = await gate.verify(space, provider, state.roles[role].policy, force=body.force)
            except RoutingStateDamaged:
                raise
            except PinRequired as exc:
                raise refusal(400, str(exc)) from None
            except GateUnavailable as exc:
                raise refusal(409, str(exc), [str(exc)] + [f"{k}: {v}" for k, v in exc.attempts.items()]) from None
            except FathomError as exc:  # e.g. no provider serves the role's model: say so
                raise refusal(failure_status(exc), str(exc)) from None
            except ConfigError as exc:
                raise refusal(400, str(exc), exc.problems) from None
            out.append(verdict_view(verdict))
        return {"verdicts": out}

    @router.get("/gate/audit/{project}", tags=["gate"])
    async def audit(project: str) -> dict[str, Any]:
        """Rows per verdict in the project's tables, and the rows a quarantined provider wrote
        since its last good check."""
        gate, service = parts.need("gate"), parts.need("service")
        await _require_project(service, project)
        report = await asyncio.to_thread(audit_rows, gate, service.store, project)
        return {
            "project": project, "lines": report.lines(), "suspect_count": report.suspect_count,
            "counts": [{"table": c.table, "provider": c.provider_id, "verdict_id": c.verdict_id,
                        "rows": c.rows, "status": c.status} for c in report.counts],
            "suspects": [{"table": s.table, "provider": s.provider_id, "verdict_id": s.verdict_id,
                          "last_good_check": iso(s.last_good_check), "quarantined_at": iso(s.quarantined_at),
                          "reason": s.reason, "rows": len(s.chunk_ids), "paths": sorted(set(s.paths))[:200]}
                         for s in report.suspects],
        }

    @router.post("/gate/reembed/{project}", tags=["gate"])
    async def reembed(project: str, body: ReembedRequest | None = None) -> dict[str, Any]:
        """Re-embed exactly the suspect rows the audit lists, with an encoder the gate cleared."""
        gate, service = parts.need("gate"), parts.need("service")
        await _require_project(service, project)
        encoder = parts.find_provider(body.encoder) if body and body.encoder else service.encoder
        try:
            report = await reembed_rows(gate, service.store, project, encoder)
        except FathomError as exc:
            raise refusal(400, str(exc)) from None
        return {"project": project, "encoder": report.encoder_id, "rows": dict(report.rows),
                "skipped": dict(report.skipped), "total": report.total}

    # -- budget ------------------------------------------------------------------------

    @router.get("/budget", tags=["budget"])
    async def get_budget() -> dict[str, Any]:
        """Where the ceiling comes from, the ceiling, effective limit, in flight, RPM window
        count, cooldown left and the last 429."""
        return budget_view(parts.need("budget"))

    @router.put("/budget", tags=["budget"])
    async def put_budget(body: BudgetChange) -> dict[str, Any]:
        """Set the manual ceiling override (1-256 permits), or remove it with null. Out of range
        is refused (400) and changes nothing."""
        from fathom.inference.budget.ceiling import validate_override

        budget = parts.need("budget")
        try:
            override = validate_override(body.override)
        except ConfigError as exc:
            raise refusal(400, str(exc)) from None
        # Persist first, then apply: a failed save leaves the live budget as it was.
        if parts.budget_record is not None:
            await asyncio.to_thread(parts.budget_record.save, override)
        budget.set_override(override)
        log.info("cloud budget override %s by the operator",
                 "removed" if body.override is None else f"set to {body.override}")
        return budget_view(budget)

    # -- jobs --------------------------------------------------------------------------

    @router.post("/jobs", tags=["jobs"], status_code=202)
    async def start_job(body: JobStart) -> dict[str, Any]:
        """Start indexing a folder (absolute path on the server) into a project."""
        jobs = parts.need("jobs")
        try:
            job = await jobs.start(body.path, body.project, body.full)
        except ConfigError as exc:
            raise refusal(400, str(exc), exc.problems) from None
        return job_view(job)

    @router.get("/jobs", tags=["jobs"])
    async def list_jobs() -> dict[str, Any]:
        return {"jobs": [job_view(j) for j in parts.need("jobs").all()]}

    @router.get("/jobs/{job_id}", tags=["jobs"])
    async def get_job(job_id: str) -> dict[str, Any]:
        """One job's live progress: phase, chunks done of total, rate, ETA."""
        try:
            return job_view(parts.need("jobs").get(job_id))
        except UnknownJob as exc:
            raise refusal(404, str(exc)) from None

    @router.post("/jobs/{job_id}/{action}", tags=["jobs"])
    async def control_job(job_id: str, action: Literal["pause", "resume", "cancel"]) -> dict[str, Any]:
        """Pause (between batches), resume (a paused job, or one a server stop interrupted), or
        cancel (the active table is unchanged; a later full run resumes from the rows already
        embedded)."""
        try:
            job = await parts.need("jobs").act(job_id, action)
        except (UnknownJob, JobConflict) as exc:
            raise refusal(failure_status(exc), str(exc)) from None
        log.info("index job %s: %s by the operator", job_id, action)
        return job_view(job)

    # -- projects ----------------------------------------------------------------------

    @router.get("/projects", tags=["projects"])
    async def list_projects() -> dict[str, Any]:
        """Every indexed project: rows per table, last indexed, its root folder and its live
        sync (watch) state."""
        service = parts.need("service")

        def load() -> list[dict[str, Any]]:
            return [project_view(service, p) for p in service.projects()]

        return {"projects": await asyncio.to_thread(load)}

    @router.post("/search", tags=["projects"])
    async def search(body: SearchRequest) -> dict[str, Any]:
        """Search as an MCP client would (`search_code`, or `search_docs` with table docs): the
        hits with why they ranked (vector and keyword ranks, cosine, match, rerank score)."""
        from fathom.server.mcp_tools import search_results

        service = parts.need("service")
        if body.project is not None:
            await _require_project(service, body.project)
        try:
            found = await search_results(service, body.query, body.project, body.table, body.k,
                                         reranker=parts.router)
        except ConfigError as exc:
            raise refusal(400, str(exc)) from None
        return found.model_dump(mode="json")

    @router.get("/projects/{project}", tags=["projects"])
    async def project_status(project: str) -> dict[str, Any]:
        """One project's index status: tables, provenance, last run, jobs, watch state."""
        service = parts.need("service")
        await _require_project(service, project)
        return asdict(await asyncio.to_thread(service.index_status, project))

    @router.delete("/projects/{project}", tags=["projects"])
    async def drop_project(project: str) -> dict[str, Any]:
        """Remove a project and everything of it (both tables, its record, its jobs, its live
        sync); its folder is not touched. A running job of it is cancelled first."""
        service = parts.need("service")
        await _require_project(service, project)
        result = await service.drop(project)
        log.info("project %s dropped by the operator", project)
        return result

    @router.put("/projects/{project}/watch", tags=["projects"])
    async def set_watch(project: str, body: WatchChange) -> dict[str, Any]:
        """Turn the project's live sync on or off (remembered across restarts)."""
        service = parts.need("service")
        await _require_project(service, project)
        return {"project": project, "watch": await service.set_watch(project, body.enabled)}

    # -- overview ----------------------------------------------------------------------

    @router.get("/overview", tags=["overview"])
    async def overview() -> dict[str, Any]:
        """Everything the dashboard shows, in one answer: policies, fleet, gate, budget, jobs."""
        return parts.overview()

    return router


ENDED_JOB_STATES = frozenset({"done", "failed", "cancelled"})


def project_view(service: Any, summary: Any) -> dict[str, Any]:
    """One project as the projects view shows it (blocking: reads the store): rows, model and
    width per table, the last run with its outcome and skips, the provenance, the live sync."""
    view: dict[str, Any] = {"name": summary.name, "root": summary.root, "tables": summary.tables,
                            "last_indexed": summary.last_indexed, "indexing": False,
                            "unfinished_full_run": summary.indexing, "damaged": summary.damaged,
                            "details": {}, "last_run": None, "watch": {}}
    if summary.damaged:
        return view
    status = service.index_status(summary.name)
    view["details"] = status.tables
    view["watch"] = status.watch
    # "indexing" means a job of it runs now; a shadow table a cancelled full run left is not that.
    view["indexing"] = any(j["state"] not in ENDED_JOB_STATES for j in status.jobs)
    run = status.last_run
    if run:  # the last completed run (kept with the project)
        view["last_run"] = {k: run.get(k) for k in ("full", "files", "chunks", "embedded", "deleted", "skipped",
                                                    "skipped_dirs", "elapsed_s", "notes", "finished_at")}
        view["last_run"]["outcome"] = "done"
    if status.jobs and status.jobs[-1]["state"] != "done":  # a later job that did not complete
        last = status.jobs[-1]
        view["last_run"] = (view["last_run"] or {}) | {
            "outcome": last["state"] + (f": {last['error']}" if last["error"] else ""), "job": last["id"]}
    return view


async def _require_project(service: Any, project: str) -> None:
    from fathom.index.store import check_project_name

    try:
        check_project_name(project)
    except ConfigError as exc:
        raise refusal(400, str(exc)) from None
    if not await asyncio.to_thread(service.store.has_project, project):
        known = [p.name for p in await asyncio.to_thread(service.store.list_projects)]
        raise refusal(404, f"no project {project!r}; index it first (`fathom jobs start PATH --project "
                           f"{project}`)" + (f". Known projects: {', '.join(known[:20])}" if known else ""))


def _name(name: str) -> str:
    if not re.fullmatch(NAME_PATTERN, name):
        raise HTTPException(400, "a sidecar name is 1-64 letters, digits, '.', '_' or '-'")
    return name
