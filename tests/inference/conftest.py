"""Tests of inference (`fathom.inference`): encoders, the gate, the pool and router, the cloud budget, OpenRouter and local models.

The suite-wide set-up (offline models, no live sync unless a test turns it on) is
`tests/conftest.py`; the helpers shared across folders are imported by name from the folder
that owns them.
"""
