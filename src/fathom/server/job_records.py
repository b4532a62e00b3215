"""Kept for its importers: the index jobs' ledger (`jobs.json`) lives in `fathom.service.jobs`."""

from fathom.service.jobs import (  # noqa: F401 - re-exported
    FINISHED,
    HOLD_AFTER_CRASHES,
    KEEP_FINISHED,
    JobLedger,
    JobRecord,
)
