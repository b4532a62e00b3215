"""Tests of inference (`fathom.inference`): encoders, the gate, the pool and router, the cloud budget, OpenRouter and local models.

The suite-wide set-up (offline models, no live sync unless a test turns it on) is
`tests/conftest.py`, which also provides every folder's fixtures by name; the plain helpers
shared across folders are imported from the folder that owns them.
"""
