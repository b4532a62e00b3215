"""What the embedding pools measured of each provider, kept across jobs and restarts.

It owns the conversion between the pool's `Sizing` and the routing state's `BatchRecord`, and
`BatchHistory`: per table, each provider's batch size and latency line, read from the routing
state at the table's first job in this process and written back after every job. It refuses
to size anything itself (the pool does).
"""

from __future__ import annotations

import logging

from fathom.config import BatchRecord, RoutingStore
from fathom.errors import ConfigError
from fathom.inference.pool import LatencyLine, Sizing

log = logging.getLogger("fathom.service")


def sizing_of(record: BatchRecord) -> Sizing:
    """A stored batch record as the pool's `Sizing` (the line fitted afresh from it)."""
    return Sizing(
        record.batch_size, record.spi, LatencyLine(record.base, record.per_item), ceiling=record.ceiling
    )


def record_of(sizing: Sizing) -> BatchRecord:
    return BatchRecord(
        batch_size=sizing.batch_size,
        spi=sizing.spi,
        base=sizing.line.base,
        per_item=sizing.line.per_item,
        ceiling=sizing.ceiling,
    )


class BatchHistory:
    """table -> Pool(history=): read from the routing state at a table's first job in this
    process, written back after every job, so a restart keeps each provider's batch size."""

    def __init__(self, routing: RoutingStore):
        self.routing = routing
        self._tables: dict[str, dict[str, Sizing]] = {}

    def of(self, table: str) -> dict[str, Sizing]:
        """What the pools measured of each provider for `table`: from the routing state the
        first time (a routing state that cannot be read at all starts every provider afresh;
        the routes themselves say so where they are used), then kept and updated in place."""
        if table not in self._tables:
            try:
                stored = self.routing.load().batches.get(table, {})
            except ConfigError as exc:
                log.warning("batch history not read: %s", exc)
                stored = {}
            self._tables[table] = {pid: sizing_of(r) for pid, r in stored.items()}
        return self._tables[table]

    def save(self) -> None:
        """Write what the pools measured to the routing state (after every job, whatever its
        end). A failed write is logged, never the job's failure: the next job measures again."""
        for table, history in self._tables.items():
            try:
                records = {pid: record_of(s) for pid, s in history.items() if s.spi is not None}
                self.routing.record_batches(table, records)
            except (ConfigError, OSError, ValueError) as exc:
                log.warning("batch history of the %s table not saved: %s", table, exc)
