"""The /control routes the scripted dev servers share (the OpenRouter emulator and the local
server): reset everything, read the counters, load a chat script. Dev/test only: no auth, so
the servers that mount them bind to 127.0.0.1.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

if TYPE_CHECKING:  # pragma: no cover
    from fathom.devtools.emulator.chat import ScriptedChat


class ScriptedState(Protocol):
    chat: ScriptedChat

    def reset(self) -> None: ...

    def counters(self) -> dict[str, Any]: ...


async def body_of(request: Request) -> dict[str, Any]:
    raw = await request.body()
    return json.loads(raw) if raw else {}


def bad(message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=400)


def add_control_routes(app: FastAPI, state: ScriptedState) -> None:
    @app.post("/control/reset")
    async def control_reset() -> dict[str, Any]:
        state.reset()
        return {"ok": True}

    @app.get("/control/counters")
    async def control_counters() -> dict[str, Any]:
        return state.counters()

    @app.post("/control/chat/script")
    async def control_script(request: Request) -> Any:
        b = await body_of(request)
        try:
            n = state.chat.load(list(b.get("turns", [])), append=bool(b.get("append", False)))
        except (TypeError, ValueError) as exc:
            return bad(str(exc))
        return {"turns": n}
