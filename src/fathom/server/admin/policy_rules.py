"""The checks of a policy change (`PUT /admin/policies`): every problem of a body against the
stored routing state, the tables' widths and the reference encoders, listed at once so one
refusal names everything to fix.

It owns the per-field rules; the rules on a merged route are `RoutingState.problems` (one
source of truth with `RoutingStore.update`). It writes nothing.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from fathom.config import RoleRoute, RoutingState
from fathom.errors import ConfigError
from fathom.policy import Policy
from fathom.roles import EMBEDDING_ROLES, FallbackMode, Role
from fathom.server.admin.bodies import MAX_WIDTH, ROUTE_FIELDS
from fathom.server.answers import body_problems

if TYPE_CHECKING:
    from fathom.service.ports import SpaceService


def reference_problems(
    service: SpaceService, state: RoutingState, changes: dict[Role, dict[str, Any]]
) -> list[str]:
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


def check_policy_changes(
    body: Any,
    state: RoutingState,
    *,
    table_widths: dict[str, dict[int, list[str]]],
    reference_widths: dict[str, int],
) -> tuple[dict[Role, dict[str, Any]], list[str]]:
    """Validate a `PUT /admin/policies` body against the stored state; returns the changes and
    every problem found (all of them, so one refusal lists everything to fix).

    `table_widths` is, per table, the width of each existing table and the projects holding it;
    `reference_widths` the width of each table's reference encoder (what a table not built yet
    will have). The rules on a merged route (a cloud-capable embedding route needs a pin, a
    model is set) are `RoutingState.problems`: one source of truth with `RoutingStore.update`.
    """
    if not isinstance(body, dict):
        return {}, [
            'the body must be a JSON object {role: {field: value}}, e.g. {"rlm": {"policy": "local"}}'
        ]
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
            problems.append(
                f"{role}: give an object with one or more of {', '.join(ROUTE_FIELDS)}, "
                f'e.g. {{"policy": "local"}}'
            )
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


def _field_problems(
    role: Role,
    fields: dict[str, Any],
    table_widths: dict[str, dict[int, list[str]]],
    reference_widths: dict[str, int],
) -> dict[str, list[str]]:
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
        out["fallback"].append(
            f"{role}: unknown fallback {fields['fallback']!r}: use "
            + " or ".join(f.value for f in FallbackMode)
        )
    for key, limit in (("model", 200), ("upstream", 100)):
        if key in fields and fields[key] is not None:
            v = fields[key]
            if not isinstance(v, str) or not v.strip() or len(v) > limit or re.search(r"\s", v):
                out[key].append(
                    f"{role}: {key} must be a name of 1-{limit} characters without spaces, or null"
                    + (" to remove the pin" if key == "upstream" else "")
                )
    if "width" in fields:
        out["width"] += _width_problems(role, fields["width"], table_widths, reference_widths)
    return out


def _width_problems(
    role: Role, w: Any, table_widths: dict[str, dict[int, list[str]]], reference_widths: dict[str, int]
) -> list[str]:
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
            out.append(
                f"{role}: width {w} does not match the {table} table's width {have} "
                f"(project {names}); a table is one vector space of one width: keep "
                f"{have}, or re-index into a new table with an encoder of width {w}"
            )
    ref = reference_widths.get(table)
    if not existing and ref is not None and ref != w:
        out.append(
            f"{role}: width {w} does not match the {table} table's reference encoder "
            f"({ref}-d), which defines the table; keep {ref}, or configure a {w}-d "
            f"reference encoder (FATHOM_LOCAL_MODEL_PATH and FATHOM_LOCAL_WIDTH)"
        )
    return out
