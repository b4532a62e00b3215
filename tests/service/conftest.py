"""Tests of the use cases (`fathom.service`): evaluation, projects from git, index jobs across restarts, PostgreSQL service runs, warm start.

The suite-wide set-up (offline models, no live sync unless a test turns it on) is
`tests/conftest.py`; the helpers shared across folders are imported by name from the folder
that owns them.
"""
