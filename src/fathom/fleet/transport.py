"""The server's WebSocket transport for sidecars: uvicorn's websockets protocol, with a message
bound per connection that starts small and is widened only for an approved sidecar.

uvicorn has one `ws_max_size` for every connection, and its protocol reads a whole message into
memory before the app sees any of it. The bound a sidecar's embed results need (megabytes) is
then the bound every stranger gets too: twenty unauthenticated connections each sending one
8 MiB message hold 160 MiB before the hub has read a byte. Here a connection starts at
`MAX_PENDING_FRAME_BYTES`, checked by the frame parser against the frame's header, so an
oversized message is refused (close 1009) before its payload is buffered; the hub widens the
bound (`widen_messages`) once the sidecar is approved.

The server runs uvicorn with `uvicorn_websocket_options()`. Under another ASGI server (a test's
plain uvicorn) `widen_messages` does nothing and the hub's own size check, made before a
message is parsed, is what remains.

It owns no policy (who is approved is the hub's) and reads nothing from the messages.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState

from fathom.fleet.protocol import MAX_FRAME_BYTES, MAX_PENDING_FRAME_BYTES

# The ASGI scope extension through which the app widens its connection's bound.
MESSAGE_BOUND = "fathom.websocket.message_bound"


class BoundedWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's websockets-sansio protocol, whose connections start at the small bound."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._ceiling = config.ws_max_size
        # Set before the first byte arrives: a frame pipelined behind the handshake request is
        # parsed before the app runs, so the app could not narrow the bound in time.
        self.conn.max_message_size = min(MAX_PENDING_FRAME_BYTES, self._ceiling)

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        # A refused handshake builds no scope. The app's task was created but has not run yet
        # (it runs at the loop's next turn), so it sees the extension.
        scope = getattr(self, "scope", None)
        if scope is not None:
            scope["extensions"][MESSAGE_BOUND] = {"widen": self._widen}

    def _widen(self, max_bytes: int) -> None:
        self.conn.max_message_size = min(max_bytes, self._ceiling)


def widen_messages(ws: Any, max_bytes: int) -> bool:
    """Let the connection behind `ws` (a Starlette WebSocket) carry messages of up to
    `max_bytes` (never past the server's `ws_max_size`); False when its transport has no such
    bound to widen."""
    bound = (ws.scope.get("extensions") or {}).get(MESSAGE_BOUND)
    if not bound:
        return False
    bound["widen"](max_bytes)
    return True


def uvicorn_websocket_options() -> dict[str, Any]:
    """What the server passes to `uvicorn.Config` for its WebSockets."""
    # The bound is on a message's payload, the same bytes the hub counts.
    return {"ws": BoundedWebSocketProtocol, "ws_max_size": MAX_FRAME_BYTES}
