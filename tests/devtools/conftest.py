"""Tests of the OpenRouter emulator the other tests run against (`fathom.devtools`).

The suite-wide set-up (offline models, no live sync unless a test turns it on) is
`tests/conftest.py`; the helpers shared across folders are imported by name from the folder
that owns them.
"""
