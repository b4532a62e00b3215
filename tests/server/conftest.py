"""Tests of the servers (`fathom.server`): MCP over stdio and HTTP, the admin API, the dashboard, OAuth, the background Fathom and its bridge.

The suite-wide set-up (offline models, no live sync unless a test turns it on) is
`tests/conftest.py`, which also provides every folder's fixtures by name; the plain helpers
shared across folders are imported from the folder that owns them.
"""
