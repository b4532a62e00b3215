"""The emulator's own /control switches, beside the shared ones (`fathom.devtools.control_api`:
reset, counters, chat script): the key report and key-read failures, credits, which keys exist,
rate/concurrency/input limits, injected 5xx and 402s, corrupt embeddings, latency, and upstreams
that drift or go down. Each checks its body and refuses (400) a shape OpenRouter never sends.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from fathom.devtools.control_api import bad, body_of
from fathom.devtools.emulator.admission import KEY_FAILURES
from fathom.devtools.emulator.encoders import VARIANTS
from fathom.devtools.emulator.limits import ConcurrencyGate, RpmWindow
from fathom.devtools.emulator.state import EmulatorConfig, EmulatorState, Fault, key_hash

CORRUPT_MODES = ("truncate", "drop", "nan", "reverse", "duplicate_index", "not_json", "other_upstream")


def _number_or_null(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def key_report_problem(b: dict[str, Any]) -> str | None:
    """Why a `/control/key` body would make GET /key answer something OpenRouter never
    sends, or None. `rate_limit`: {requests: number, interval: "10s"}, null, or "absent"
    (degenerate figures such as 0 or -1 requests are allowed: real keys report them)."""
    for k in ("limit", "limit_remaining", "usage", "usage_daily", "usage_weekly", "usage_monthly"):
        if k in b and not _number_or_null(b[k]):
            return f"{k} must be a number or null"
    for k in ("is_free_tier", "is_management_key", "include_byok_in_limit"):
        if k in b and not isinstance(b[k], bool):
            return f"{k} must be true or false"
    if "rate_limit" in b:
        rl = b["rate_limit"]
        if rl is None or rl == "absent":
            return None
        if not (
            isinstance(rl, dict)
            and set(rl) <= {"requests", "interval", "note"}
            and _number_or_null(rl.get("requests"))
            and rl.get("requests") is not None
            and isinstance(rl.get("interval"), str)
        ):
            return 'rate_limit must be {"requests": number, "interval": "10s"}, null or "absent"'
    return None


def fault_from(b: dict[str, Any], **params: Any) -> Fault:
    count = b.get("count", 1)
    eps = b.get("endpoints")
    return Fault(
        remaining=None if count is None else int(count),
        rate=float(b.get("rate", 0.0)),
        endpoints=None if eps is None else frozenset(eps),
        params=params,
    )


class Switches:
    def __init__(self, state: EmulatorState, cfg: EmulatorConfig):
        self.state, self.cfg = state, cfg

    def router(self) -> APIRouter:
        r = APIRouter(prefix="/control")
        r.add_api_route("/peak", self.peak, methods=["POST"])
        r.add_api_route("/state", self.snapshot, methods=["GET"])
        r.add_api_route("/key", self.key, methods=["PUT"])
        r.add_api_route("/key-fail", self.key_fail, methods=["POST"])
        r.add_api_route("/credits", self.credits, methods=["PUT"])
        r.add_api_route("/keys", self.keys, methods=["PUT"])
        r.add_api_route("/limits", self.limits, methods=["PUT"])
        r.add_api_route("/fail", self.fail, methods=["POST"])
        r.add_api_route("/in-flight-402", self.in_flight_402, methods=["POST"])
        r.add_api_route("/credits-402", self.credits_402, methods=["POST"])
        r.add_api_route("/corrupt", self.corrupt, methods=["POST"])
        r.add_api_route("/latency", self.latency, methods=["PUT"])
        r.add_api_route("/upstreams/{name}", self.upstream, methods=["PUT"])
        return r

    async def peak(self) -> dict[str, Any]:
        """The peak of requests in flight since the last call (or the start), and how many are
        in flight now; the next period starts from those."""
        in_flight = self.state.concurrency.in_flight
        return {"peak": self.state.concurrency.take_peak(), "in_flight": in_flight}

    async def snapshot(self) -> dict[str, Any]:
        return self.state.snapshot()

    async def key(self, request: Request) -> Any:
        """Partial update of what GET /key reports. `rate_limit`: an object, null, or
        "absent" (field omitted)."""
        state = self.state
        b = await body_of(request)
        unknown = set(b) - set(state.key_report) - {"rate_limit"}
        if unknown:
            return bad(f"unknown key fields {sorted(unknown)}")
        problem = key_report_problem(b)
        if problem:
            return bad(problem)
        state.key_report.update(b)
        return {"key": state.key_report}

    async def key_fail(self, request: Request) -> Any:
        """Make GET /key (and, with `endpoints`, GET /credits) answer `status` — 401, 402, 429
        or 5xx — for the next `count` reads (null: all)."""
        b = await body_of(request)
        status = int(b.get("status", 401))
        if status not in KEY_FAILURES and not 500 <= status <= 599:
            return bad(f"status must be one of {sorted(KEY_FAILURES)} or 5xx")
        eps = b.get("endpoints") or ["key"]
        if set(eps) - {"key", "credits"}:
            return bad("endpoints may name only key and credits")
        self.state.key_fail = fault_from({**b, "endpoints": eps}, status=status)
        return {"ok": True}

    async def credits(self, request: Request) -> Any:
        state = self.state
        b = await body_of(request)
        for k in ("total_credits", "total_usage"):
            if k in b:
                state.credits[k] = float(b[k])
        if "for_all_keys" in b:
            state.credits_for_all = bool(b["for_all_keys"])
        return {"credits": state.credits, "for_all_keys": state.credits_for_all}

    async def keys(self, request: Request) -> Any:
        """Which keys are valid (`accepted`: list, or null for any sk-or- key) and which are
        management keys. Stored as hashes only."""
        state = self.state
        b = await body_of(request)
        if "accepted" in b:
            state.accepted_hashes = None if b["accepted"] is None else {key_hash(k) for k in b["accepted"]}
        if "management" in b:
            state.management_hashes = {key_hash(k) for k in b["management"]}
        return {"ok": True}

    async def limits(self, request: Request) -> Any:
        """`rpm` (exact sliding 60 s window; null: off), `concurrency` (null: off),
        `max_inputs` (the most inputs an embedding request may carry, a 400 above it; null:
        off), `retry_after` (send the header on 429s), `retry_after_seconds` (fixed value)."""
        state = self.state
        b = await body_of(request)
        if "rpm" in b:
            state.rpm = (
                None
                if b["rpm"] is None
                else RpmWindow(int(b["rpm"]), window=float(b.get("window", 60.0)), clock=self.cfg.clock)
            )
        if "concurrency" in b:
            gate = ConcurrencyGate(None if b["concurrency"] is None else int(b["concurrency"]))
            gate.in_flight, gate.peak = state.concurrency.in_flight, state.concurrency.peak
            state.concurrency = gate
        if "max_inputs" in b:
            v = b["max_inputs"]
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                return bad("max_inputs must be a whole number of at least 1, or null")
            state.max_inputs = v
        if "retry_after" in b:
            state.send_retry_after = bool(b["retry_after"])
        if "retry_after_seconds" in b:
            v = b["retry_after_seconds"]
            state.retry_after_seconds = None if v is None else float(v)
        return state.snapshot()

    async def fail(self, request: Request) -> Any:
        """Inject 5xx: the next `count` requests (null: all), or each with probability
        `rate`; `status` (default 502); optional `endpoints` filter; optional `page`: an HTML
        page answered instead of the JSON error body, as a proxy in front of the API does."""
        b = await body_of(request)
        status = int(b.get("status", 502))
        if not 500 <= status <= 599:
            return bad("status must be 5xx")
        page = b.get("page")
        if page is not None and not isinstance(page, str):
            return bad("page must be a string (an HTML page), or null")
        self.state.fail = fault_from(b, status=status, page=page)
        return {"ok": True}

    async def in_flight_402(self, request: Request) -> Any:
        b = await body_of(request)
        self.state.in_flight_402 = fault_from(b, retry_after=float(b.get("retry_after", 2)))
        return {"ok": True}

    async def credits_402(self, request: Request) -> Any:
        self.state.credits_402 = fault_from(await body_of(request))
        return {"ok": True}

    async def corrupt(self, request: Request) -> Any:
        """Make embedding responses wrong: mode truncate | drop (one vector fewer than inputs)
        | nan | reverse | duplicate_index | not_json (a 200 whose body is an HTML page) |
        other_upstream (the response names an upstream other than the one that was pinned),
        for the next `count` responses (null: all)."""
        b = await body_of(request)
        mode = b.get("mode")
        if mode not in CORRUPT_MODES:
            return bad(f"mode must be one of {', '.join(CORRUPT_MODES)}")
        self.state.corrupt = fault_from(b, mode=mode)
        return {"ok": True}

    async def latency(self, request: Request) -> Any:
        b = await body_of(request)
        self.state.latency_base = float(b.get("base_ms", 0)) / 1000.0
        self.state.latency_per_item = float(b.get("per_item_ms", 0)) / 1000.0
        return {"ok": True}

    async def upstream(self, name: str, request: Request) -> Any:
        """Drift an upstream to another encoder `variant`, or mark it `down`."""
        state = self.state
        b = await body_of(request)
        models = [m for m, ups in state.upstreams.items() if name in ups]
        if not models:
            return JSONResponse({"error": f"no upstream named {name!r}"}, status_code=404)
        if "variant" in b:
            if b["variant"] not in VARIANTS:
                return bad(f"variant must be one of {', '.join(VARIANTS)}")
            for m in models:
                state.upstreams[m][name] = b["variant"]
        if "down" in b:
            (state.down.add if b["down"] else state.down.discard)(name)
        return state.snapshot()
