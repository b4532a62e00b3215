"""The key checks sidecars report: the non-secret limits a sidecar read for its OpenRouter key
(`fleet.keycheck`), kept per sidecar and handed to whoever listens (the server's budget).

It owns the last record per sidecar (kept after the sidecar disconnects) and its listeners. It
refuses a key check from a sidecar that is not approved: only a sidecar the server gave the key
speaks for the key (the hub's frame reader checks that before calling `record`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from fathom.fleet import protocol as p
from fathom.fleet.keycheck import KeyCheckRecord
from fathom.inference.cloud_health import CloudHealth

log = logging.getLogger("fathom.fleet.hub")


class KeyReports:
    """The last key check of each sidecar, and who wants to hear of new ones."""

    def __init__(self, cloud_health: CloudHealth, now: Callable[[], datetime]):
        self.cloud_health = cloud_health
        self.now = now
        self._records: dict[str, KeyCheckRecord] = {}
        self._listeners: list[Callable[[KeyCheckRecord], None]] = []

    def listen(self, listener: Callable[[KeyCheckRecord], None]) -> None:
        self._listeners.append(listener)

    def last(self, name: str) -> KeyCheckRecord | None:
        return self._records.get(name)

    def record(self, name: str, frame: p.KeyCheck) -> None:
        record = KeyCheckRecord(
            sidecar=name, outcome=frame.outcome, reason=frame.reason, at=self.now(), facts=frame.facts
        )
        self._records[name] = record
        # The check speaks for every cloud route of this sidecar: "serving" on ok, else the
        # refusal (a bad key shows as rejected within one check of the push).
        self.cloud_health.note(name, frame.outcome, f"key check ({frame.reason})")
        log.info("key check on %s (%s): %s", name, frame.reason, frame.outcome)
        for listener in list(self._listeners):
            try:
                listener(record)
            except Exception:  # one broken listener must not stop the others
                log.exception("key check listener failed")
