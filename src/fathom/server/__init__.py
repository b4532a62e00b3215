"""The fathom server: one ASGI app (admin API, the sidecar WebSocket, and later MCP and the
dashboard), assembled in `app.py`."""
