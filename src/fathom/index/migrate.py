"""`fathom store migrate`: move an index from LanceDB to PostgreSQL, provenance preserved.

Every row keeps its identity and its history: chunk id, content hash, path, line range,
symbol, text, vector, and its provenance — provider id, the gate verdict id it was written
under, and its original `written_at` — so the audit (`provenance_counts`, `written_since`,
re-embedding a quarantined verdict's rows) answers the same after the move as before it. The
space identity of each table (reference encoder, model, width) moves with it, and the gate's
state (verdicts, golden vectors) and the routing state can be copied into the database too
(`migrate_gate_state`), so every server on that database sees the same cleared encoders.

How it is safe: each (project, table) is copied into a *shadow* table on the target and
promoted in one transaction only after its row count and per-verdict counts match the source.
A migration interrupted at any point leaves the target's active tables as they were; running
it again resumes the shadow (rows already copied are skipped by chunk id). The source is only
read, never changed.

API:
    migrate(source: Store, target: PostgresStore, *, projects=None, batch_size=1000,
            progress=None) -> MigrationReport
    migrate_gate_state(data_dir: Path, target: PostgresStore) -> GateStateReport
    read_rows(store, project, table, batch_size=1000) -> Iterator[RowBatch]
    python -m fathom.index.migrate SOURCE_DIR postgresql://… [--project NAME ...] [--data-dir D]

What it refuses to do: re-decide admission of rows the source already admitted (see
`PostgresStore.copy_admitted_rows`, the migration's own write path), write into another space than the source table's, promote a copy
whose counts differ from the source, or print a password (store errors and `target.url` are redacted).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import numpy as np

from fathom.errors import FathomError, StoreError
from fathom.index.pgstore import (
    PgGoldenStore,
    PgRoutingStore,
    PgVerdictStore,
    PostgresStore,
    RowBatch,
)
from fathom.index.store import TABLE_KINDS, LanceStore, Slot, Store, lance_repair

Progress = Callable[[str, str, int, int], None]  # project, table, rows copied, rows total


class MigrationMismatch(StoreError):
    """The copy does not match its source; it was not promoted (the shadow stays, resumable)."""

    def __init__(
        self,
        project: str,
        table: str,
        source: dict[tuple[str, str | None], int],
        target: dict[tuple[str, str | None], int],
    ):
        self.project, self.table, self.source, self.target = project, table, source, target
        super().__init__(
            f"project {project!r} table {table!r}: the copy holds {sum(target.values())} rows "
            f"in {len(target)} provenance groups, the source {sum(source.values())} in "
            f"{len(source)}; it was not promoted. Make sure nothing writes to the source "
            f"during the migration, then run it again (it resumes)."
        )


@dataclass(frozen=True)
class TableCopy:
    project: str
    table: str
    rows: int
    copied: int  # rows written by this run (less than `rows` when resuming)
    provenance: dict[tuple[str, str | None], int]
    resumed: bool


@dataclass
class MigrationReport:
    tables: list[TableCopy] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)


@dataclass(frozen=True)
class GateStateReport:
    verdicts: int
    golden: int
    routing: bool


def read_rows(
    store: Store, project: str, table: str, batch_size: int = 1000, slot: Slot = Slot.ACTIVE
) -> Iterator[RowBatch]:
    """Every stored row of one table with its vector and provenance, in batches."""
    if isinstance(store, PostgresStore):
        yield from store.export_rows(project, table, slot, batch_size)
        return
    if not isinstance(store, LanceStore):
        raise StoreError(f"cannot read rows out of a {type(store).__name__}")
    for rb in lance_repair.record_batches(store, project, table, slot, batch_size):
        if rb.num_rows == 0:
            continue
        cols = rb.to_pydict()
        width = rb.schema.field("vector").type.list_size
        vec = (
            rb.column(rb.schema.get_field_index("vector"))
            .flatten()
            .to_numpy(zero_copy_only=False)
            .reshape(-1, width)
        )
        yield RowBatch(
            chunk_ids=cols["chunk_id"],
            content_hashes=cols["content_hash"],
            paths=cols["path"],
            languages=cols["language"],
            start_lines=cols["start_line"],
            end_lines=cols["end_line"],
            symbols=cols["symbol"],
            texts=cols["text"],
            vectors=np.ascontiguousarray(vec, dtype=np.float32),
            provider_ids=cols["provider_id"],
            verdict_ids=cols["verdict_id"],
            written_at=[w if w is None or w.tzinfo else w.replace(tzinfo=UTC) for w in cols["written_at"]],
            kinds=cols.get("kind"),
        )


_T = TypeVar("_T")


def _pick(values: list[_T], keep: list[int]) -> list[_T]:
    return [values[i] for i in keep]


def _take(batch: RowBatch, keep: list[int]) -> RowBatch:
    return RowBatch(
        chunk_ids=_pick(batch.chunk_ids, keep),
        content_hashes=_pick(batch.content_hashes, keep),
        paths=_pick(batch.paths, keep),
        languages=_pick(batch.languages, keep),
        start_lines=_pick(batch.start_lines, keep),
        end_lines=_pick(batch.end_lines, keep),
        symbols=_pick(batch.symbols, keep),
        texts=_pick(batch.texts, keep),
        vectors=batch.vectors[keep],
        provider_ids=_pick(batch.provider_ids, keep),
        verdict_ids=_pick(batch.verdict_ids, keep),
        written_at=_pick(batch.written_at, keep),
        kinds=[batch.kind(i) for i in keep],
    )


def migrate_table(
    source: Store,
    target: PostgresStore,
    project: str,
    table: str,
    *,
    batch_size: int = 1000,
    progress: Progress | None = None,
) -> TableCopy | None:
    info = source.table_info(project, table)
    if info.space is None:
        return None  # no active table of this kind in the source
    shadow = target.begin_shadow(project, table, info.space)
    have = target.chunk_ids(project, table, Slot.SHADOW) if shadow.resumed else set()
    total, done, copied = info.rows, len(have), 0
    for batch in read_rows(source, project, table, batch_size):
        keep = [i for i, cid in enumerate(batch.chunk_ids) if cid not in have]
        if not keep:
            continue
        part = batch if len(keep) == len(batch) else _take(batch, keep)
        copied += target.copy_admitted_rows(project, table, part, slot=Slot.SHADOW)
        done += len(part)
        if progress is not None:
            progress(project, table, done, total)
    want = source.provenance_counts(project, table)
    got = target.provenance_counts(project, table, Slot.SHADOW)
    if want != got:
        raise MigrationMismatch(project, table, want, got)
    target.promote(project, table, last_indexed=info.last_indexed)
    return TableCopy(project, table, sum(got.values()), copied, got, shadow.resumed)


def migrate(
    source: Store,
    target: PostgresStore,
    *,
    projects: Sequence[str] | None = None,
    batch_size: int = 1000,
    progress: Progress | None = None,
) -> MigrationReport:
    """Copy every (or the named) project's tables from `source` into `target`."""
    names = list(projects) if projects else [p.name for p in source.list_projects()]
    report = MigrationReport()
    for project in names:
        if not source.has_project(project):
            from fathom.index.store import UnknownProject

            raise UnknownProject(project, [p.name for p in source.list_projects()])
        for table in TABLE_KINDS:
            done = migrate_table(source, target, project, table, batch_size=batch_size, progress=progress)
            if done is not None:
                report.tables.append(done)
    return report


def migrate_gate_state(data_dir: Path | str, target: PostgresStore) -> GateStateReport:
    """Copy the gate's verdicts (with the watch list of cleared providers) and golden vectors
    and the routing state from the JSON files under `data_dir` into the database (idempotent:
    verdicts upsert by id, keeping order)."""
    from fathom.config import RoutingStore
    from fathom.inference.gate import GoldenStore, JsonVerdictStore

    base = Path(data_dir)
    verdicts = 0
    vfile = base / "gate" / "verdicts.json"
    if vfile.exists():
        pg_verdicts, source = PgVerdictStore(target), JsonVerdictStore(vfile)
        for v in source.all():
            pg_verdicts.put(v)
            verdicts += 1
        for w in source.watched():  # whom a server on the database re-probes at its start
            pg_verdicts.watch(w)
    golden = 0
    gdir = base / "gate" / "golden"
    if gdir.is_dir():
        src, dst = GoldenStore(gdir), PgGoldenStore(target)
        for f in sorted(gdir.glob("*.json")):
            g = src.get(json.loads(f.read_text(encoding="utf-8"))["space"])
            if g is not None:
                dst.put(g)
                golden += 1
    routing = RoutingStore(base)
    moved = routing.path.exists()
    if moved:
        PgRoutingStore(target).save(routing.load())
    return GateStateReport(verdicts, golden, moved)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="fathom store migrate",
        description="Copy a LanceDB index into PostgreSQL + pgvector, provenance preserved.",
    )
    parser.add_argument("source", help="the LanceDB folder (e.g. ~/.fathom/lance)")
    parser.add_argument("target", help="postgresql://user:password@host:port/database")
    parser.add_argument(
        "--project", action="append", default=None, help="only this project (repeatable); default: all"
    )
    parser.add_argument(
        "--data-dir", default=None, help="also copy gate verdicts, golden vectors and routing state from here"
    )
    parser.add_argument("--batch-size", type=int, default=1000)
    args = parser.parse_args(argv)
    try:
        source = LanceStore(Path(args.source).expanduser())
        target = PostgresStore(args.target)

        def show(project: str, table: str, done: int, total: int) -> None:
            print(f"\r{project}/{table}: {done}/{total} rows", end="", file=sys.stderr)

        report = migrate(source, target, projects=args.project, batch_size=args.batch_size, progress=show)
        print(file=sys.stderr)
        for t in report.tables:
            groups = ", ".join(
                f"{p}/{v or 'no verdict'}: {n}"
                for (p, v), n in sorted(t.provenance.items(), key=lambda kv: str(kv[0]))
            )
            print(f"{t.project}/{t.table}: {t.rows} rows ({groups})" + (" [resumed]" if t.resumed else ""))
        if args.data_dir:
            g = migrate_gate_state(args.data_dir, target)
            print(
                f"gate: {g.verdicts} verdicts, {g.golden} golden vector sets; routing state "
                f"{'copied' if g.routing else 'not found'}"
            )
        print(f"done: {report.rows} rows into {target.url} at {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC")
    except FathomError as exc:
        print(f"error: {exc}", file=sys.stderr)  # store errors carry redacted URLs only
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
