"""Tests of the OpenRouter emulator the other tests run against (`fathom.devtools`).

The suite-wide set-up (offline models, no live sync unless a test turns it on) is
`tests/conftest.py`, which also provides every folder's fixtures by name; the plain helpers
shared across folders are imported from the folder that owns them.
"""
