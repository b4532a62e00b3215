"""A small synchronous client for the scripted local server's /control API."""

from __future__ import annotations

from typing import Any, cast

from fathom.devtools.emulator.control import ControlClient


class LocalServerControl(ControlClient):
    """`reset`, `counters` and `script` as every scripted server's; plus the requests the server
    received, faults and a delay."""

    def requests(self) -> list[dict[str, Any]]:
        """The last 200 requests: endpoint, model, messages, tools, stream, max_tokens, query…"""
        # `/control/requests` answers the request log: a list of JSON objects.
        return cast(list[dict[str, Any]], self._call("GET", "/requests")["requests"])

    def fail(
        self,
        status: int = 500,
        count: int | None = 1,
        message: str = "Internal Server Error",
        kind: str = "InternalServerError",
        endpoints: list[str] | None = None,
    ) -> None:
        """The next `count` requests (every one: None) to `endpoints` (chat, rerank,
        tei-rerank; all: None) answer `status` with `message` in vLLM's error body."""
        self._call(
            "POST",
            "/fail",
            {"status": status, "count": count, "message": message, "type": kind, "endpoints": endpoints},
        )

    def delay(self, seconds: float) -> None:
        """Wait this long before answering each request (0: answer at once)."""
        self._call("PUT", "/delay", {"seconds": seconds})

    def context(self, tokens: int) -> None:
        """The model's context window, in (estimated) tokens, until the next reset."""
        self._call("PUT", "/context", {"tokens": tokens})
