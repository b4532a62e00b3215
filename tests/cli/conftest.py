"""Tests of the command line (`fathom.cli`), driven as a person does: commands, their output and exit codes, the operator's walk-throughs.

The suite-wide set-up (offline models, no live sync unless a test turns it on) is
`tests/conftest.py`; the helpers shared across folders are imported by name from the folder
that owns them.
"""
