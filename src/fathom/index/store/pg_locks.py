"""The index lock of a project in PostgreSQL: one indexer per project across servers.

A session advisory lock (`pg_try_advisory_lock`) on a connection of its own for as long as the
job runs; PostgreSQL releases it when that connection dies, so a crashed server never blocks a
project. The holder is recorded in `project_locks` and trusted only while its backend really
holds the lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from fathom.index.store.errors import LockHolder, ProjectLocked
from fathom.index.store.pg_database import LOCK_NAMESPACE, Database, utc
from fathom.index.store.rules import check_project_name

log = logging.getLogger(__name__)


def pg_lock_holder(db: Database, q: Callable[..., Any], project: str) -> LockHolder | None:
    """Who holds the index lock of `project` now, or None. The recorded row is trusted
    only while its backend really holds the advisory lock (a crashed holder's row is
    stale: PostgreSQL released its lock with its connection)."""
    conn = db.conn()
    row = conn.execute(
        q(
            "SELECT l.holder, l.host, l.pid, l.since FROM {s}.project_locks AS l "
            "WHERE l.project = %s AND EXISTS (SELECT 1 FROM pg_locks AS k "
            " WHERE k.locktype = 'advisory' AND k.granted AND k.pid = l.backend_pid"
            " AND k.classid = %s::int4::oid AND k.objid = hashtext(%s)::oid AND k.objsubid = 2)"
        ),
        (project, LOCK_NAMESPACE, project),
    ).fetchone()
    if row is not None:
        return LockHolder(project, row[0], row[1], int(row[2]), utc(row[3]))  # type: ignore[arg-type]  # backend_start is set
    # Not recorded (yet): the holding session's application_name still names the server.
    row = conn.execute(
        "SELECT a.application_name, host(a.client_addr), a.pid, a.backend_start "
        "FROM pg_locks AS k JOIN pg_stat_activity AS a ON a.pid = k.pid "
        "WHERE k.locktype = 'advisory' AND k.granted AND k.classid = %s::int4::oid "
        "AND k.objid = hashtext(%s)::oid AND k.objsubid = 2",
        (LOCK_NAMESPACE, project),
    ).fetchone()
    if row is None:
        return None
    name = (row[0] or "").removeprefix("fathom-lock:")
    return LockHolder(project, name or "unknown", row[1] or "local", int(row[2]), utc(row[3]))  # type: ignore[arg-type]  # backend_start is set


@contextlib.contextmanager
def hold_pg_index_lock(
    db: Database, q: Callable[..., Any], project: str, holder: str | None, clock: Callable[[], float]
) -> Iterator[LockHolder]:
    """Hold the index lock of `project` for the duration of the block.

    A session advisory lock on a dedicated connection: PostgreSQL keeps it while that
    connection lives, and drops it if the holder dies. A second server (or a second job in
    this one) gets `ProjectLocked` naming the holder, immediately."""
    check_project_name(project)
    host = socket.gethostname()
    holder = holder or f"{host}:{os.getpid()}"
    conn = db.connect(application_name=f"fathom-lock:{holder}")
    try:
        got = conn.execute(
            "SELECT pg_try_advisory_lock(%s, hashtext(%s))", (LOCK_NAMESPACE, project)
        ).fetchone()[0]
        if not got:
            raise ProjectLocked(project, pg_lock_holder(db, q, project))
        since = datetime.fromtimestamp(clock(), tz=UTC)
        conn.execute(
            q(
                "INSERT INTO {s}.project_locks (project, holder, host, pid, backend_pid, since) "
                "VALUES (%s, %s, %s, %s, pg_backend_pid(), %s) ON CONFLICT (project) DO UPDATE "
                "SET holder = EXCLUDED.holder, host = EXCLUDED.host, pid = EXCLUDED.pid, "
                "backend_pid = EXCLUDED.backend_pid, since = EXCLUDED.since"
            ),
            (project, holder, host, os.getpid(), since),
        )
        info = LockHolder(project, holder, host, os.getpid(), since)
        log.info("index lock of project %r taken by %s", project, holder)
        try:
            yield info
        finally:
            with contextlib.suppress(Exception):
                conn.execute(
                    q("DELETE FROM {s}.project_locks WHERE project = %s AND backend_pid = pg_backend_pid()"),
                    (project,),
                )
                conn.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (LOCK_NAMESPACE, project))
    finally:
        conn.close()
