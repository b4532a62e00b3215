"""Small synchronous clients for the scripted dev servers' /control APIs (the emulator's here;
the local server's in `fathom.devtools.localserver.control`), for tests and scripts."""

from __future__ import annotations

from typing import Any, cast

import httpx


class ControlClient:
    """What every scripted dev server's /control answers (`fathom.devtools.control_api`):
    reset, counters and the chat script."""

    def __init__(self, root_url: str, *, timeout: float = 30.0):
        self._http = httpx.Client(base_url=root_url.rstrip("/") + "/control", timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        resp = self._http.request(method, path, json=body)
        if resp.status_code != 200:
            raise RuntimeError(f"emulator control {method} {path} failed: {resp.status_code} {resp.text}")
        # Every control route answers a JSON object (see `api.py` / `localserver/app.py`).
        return cast(dict[str, Any], resp.json())

    def reset(self) -> None:
        self._call("POST", "/reset")

    def counters(self) -> dict[str, Any]:
        return self._call("GET", "/counters")

    def script(self, turns: list[dict[str, Any]], append: bool = False) -> int:
        return int(self._call("POST", "/chat/script", {"turns": turns, "append": append})["turns"])


class EmulatorControl(ControlClient):
    def take_peak(self) -> dict[str, Any]:
        """{"peak", "in_flight"}: the peak in flight since the last call; starts a new period."""
        return self._call("POST", "/peak")

    def state(self) -> dict[str, Any]:
        return self._call("GET", "/state")

    def set_key(self, **fields: Any) -> dict[str, Any]:
        """What GET /key reports; rate_limit=dict | None | "absent"."""
        return self._call("PUT", "/key", fields)

    def set_credits(self, **fields: Any) -> dict[str, Any]:
        return self._call("PUT", "/credits", fields)

    def set_keys(self, **fields: Any) -> dict[str, Any]:
        """accepted=[keys] | None (any sk-or- key), management=[keys]."""
        return self._call("PUT", "/keys", fields)

    def set_limits(self, **fields: Any) -> dict[str, Any]:
        """rpm=, concurrency=, retry_after=bool, retry_after_seconds=, window= (for rpm),
        max_inputs= (the most inputs an embedding request may carry; None: no limit)."""
        return self._call("PUT", "/limits", fields)

    def fail(
        self,
        status: int = 502,
        count: int | None = 1,
        rate: float = 0.0,
        endpoints: list[str] | None = None,
        page: str | None = None,
    ) -> None:
        """`page`: an HTML page answered instead of the JSON error body (a proxy's)."""
        fields = {"status": status, "count": count, "rate": rate, "endpoints": endpoints, "page": page}
        self._call("POST", "/fail", fields)

    def in_flight_402(
        self, count: int | None = 1, retry_after: float = 2.0, endpoints: list[str] | None = None
    ) -> None:
        self._call(
            "POST", "/in-flight-402", {"count": count, "retry_after": retry_after, "endpoints": endpoints}
        )

    def credits_402(self, count: int | None = 1, endpoints: list[str] | None = None) -> None:
        self._call("POST", "/credits-402", {"count": count, "endpoints": endpoints})

    def key_fail(self, status: int = 401, count: int | None = 1, endpoints: list[str] | None = None) -> None:
        """GET /key (and /credits, if named) answers `status` for the next `count` reads."""
        self._call("POST", "/key-fail", {"status": status, "count": count, "endpoints": endpoints})

    def corrupt(self, mode: str, count: int | None = 1) -> None:
        self._call("POST", "/corrupt", {"mode": mode, "count": count})

    def latency(self, base_ms: float = 0.0, per_item_ms: float = 0.0) -> None:
        self._call("PUT", "/latency", {"base_ms": base_ms, "per_item_ms": per_item_ms})

    def drift(self, upstream: str, variant: str) -> dict[str, Any]:
        return self._call("PUT", f"/upstreams/{upstream}", {"variant": variant})

    def set_down(self, upstream: str, down: bool = True) -> dict[str, Any]:
        return self._call("PUT", f"/upstreams/{upstream}", {"down": down})
