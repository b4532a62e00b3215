"""Tests of the use cases (`fathom.service`): evaluation, projects from git, index jobs across restarts, PostgreSQL service runs, warm start.

The suite-wide set-up (offline models, no live sync unless a test turns it on) is
`tests/conftest.py`, which also provides every folder's fixtures by name; the plain helpers
shared across folders are imported from the folder that owns them.
"""
