"""The gate's and the router's state in the shared database: verdicts and the watch list,
golden vectors, and the routing state, so every server sees the same cleared encoders and the
same routes. Kept by PostgreSQL's store for the gate and the router; no vector table here.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator
from typing import Any

import numpy as np

from fathom.config import (
    RoutingState,
    RoutingStateDamaged,
    RoutingStore,
    default_routes,
    state_defect,
)
from fathom.index.store.pg_database import Database
from fathom.index.store.postgres import PostgresStore


def _database(source: PostgresStore | Database | str) -> Database:
    if isinstance(source, PostgresStore):
        return source.db
    if isinstance(source, Database):
        return source
    return Database(source)


class PgVerdictStore:
    """The gate's `VerdictStore` in the shared database: every server reads the same verdicts.

    `put` replaces a verdict with the same id in place (its decision order is kept), like
    `JsonVerdictStore`; reads go to the database each time, so a verdict revoked by one server
    is revoked for all of them at once."""

    def __init__(self, source: PostgresStore | Database | str):
        self.db = _database(source)

    def __repr__(self) -> str:
        return f"PgVerdictStore({self.db.url})"

    def _q(self, template: str) -> Any:
        from psycopg import sql

        return sql.SQL(template).format(s=sql.Identifier(self.db.schema))

    def put(self, verdict: Any) -> None:
        self.db.conn().execute(
            self._q(
                "INSERT INTO {s}.verdicts (verdict_id, body) VALUES (%s, %s) "
                "ON CONFLICT (verdict_id) DO UPDATE SET body = EXCLUDED.body, updated_at = now()"
            ),
            (verdict.verdict_id, json.dumps(verdict.to_json())),
        )

    def get(self, verdict_id: str) -> Any:
        from fathom.inference.gate import Verdict

        row = (
            self.db.conn()
            .execute(self._q("SELECT body FROM {s}.verdicts WHERE verdict_id = %s"), (verdict_id,))
            .fetchone()
        )
        return Verdict.from_json(row[0]) if row else None

    def all(self) -> list[Any]:
        from fathom.inference.gate import Verdict

        rows = self.db.conn().execute(self._q("SELECT body FROM {s}.verdicts ORDER BY seq")).fetchall()
        return [Verdict.from_json(r[0]) for r in rows]

    def watch(self, watched: Any) -> None:
        self.db.conn().execute(
            self._q(
                "INSERT INTO {s}.gate_watch (space, provider_id, body) VALUES (%s, %s, %s) "
                "ON CONFLICT (space, provider_id) DO UPDATE SET body = EXCLUDED.body"
            ),
            (watched.space.key, watched.provider_id, json.dumps(watched.to_json())),
        )

    def unwatch(self, space_key: str, provider_id: str) -> None:
        self.db.conn().execute(
            self._q("DELETE FROM {s}.gate_watch WHERE space = %s AND provider_id = %s"),
            (space_key, provider_id),
        )

    def watched(self) -> list[Any]:
        from fathom.inference.gate import Watched

        rows = (
            self.db.conn()
            .execute(self._q("SELECT body FROM {s}.gate_watch ORDER BY space, provider_id"))
            .fetchall()
        )
        return [Watched.from_json(r[0]) for r in rows]


class PgGoldenStore:
    """The gate's golden vectors in the shared database (same interface as `GoldenStore`)."""

    def __init__(self, source: PostgresStore | Database | str):
        self.db = _database(source)

    def __repr__(self) -> str:
        return f"PgGoldenStore({self.db.url})"

    def get(self, space_key: str, probe_set: str | None = None) -> Any:
        from psycopg import sql

        from fathom.inference.gate import Golden

        row = (
            self.db.conn()
            .execute(
                sql.SQL("SELECT body FROM {}.golden WHERE space = %s").format(sql.Identifier(self.db.schema)),
                (space_key,),
            )
            .fetchone()
        )
        if row is None:
            return None
        d = row[0]
        n, w = d["shape"]
        vec = np.frombuffer(base64.b64decode(d["vectors"]), dtype="<f4").reshape(n, w).copy()
        golden = Golden(
            space=d["space"],
            probe_set=d["probe_set"],
            probe_ids=tuple(d["probe_ids"]),
            reference=d["reference"],
            recorded_at=d["recorded_at"],
            vectors=vec,
        )
        if probe_set is not None and golden.probe_set != probe_set:
            return None
        return golden

    def put(self, golden: Any) -> None:
        from psycopg import sql

        vec = np.ascontiguousarray(golden.vectors, dtype="<f4")
        body = {
            "space": golden.space,
            "probe_set": golden.probe_set,
            "probe_ids": list(golden.probe_ids),
            "reference": golden.reference,
            "recorded_at": golden.recorded_at,
            "shape": list(vec.shape),
            "vectors": base64.b64encode(vec.tobytes()).decode("ascii"),
        }
        self.db.conn().execute(
            sql.SQL(
                "INSERT INTO {}.golden (space, body) VALUES (%s, %s) "
                "ON CONFLICT (space) DO UPDATE SET body = EXCLUDED.body"
            ).format(sql.Identifier(self.db.schema)),
            (golden.space, json.dumps(body)),
        )


class PgRoutingStore(RoutingStore):
    """`RoutingStore` in the shared database: load / save / update, same validation.

    `update` runs in one transaction with the routing row locked, so two servers changing
    routes at once never lose each other's change. Only safe fields exist in `RoutingState`
    (no key field, unknown fields refused), so nothing secret can reach the table."""

    def __init__(
        self, source: PostgresStore | Database | str
    ):  # not RoutingStore's: no data dir, the database holds the state
        self.db = _database(source)
        self.path = None  # type: ignore[assignment]  # not a file

    def __repr__(self) -> str:
        return f"PgRoutingStore({self.db.url})"

    def _q(self, template: str) -> Any:
        from psycopg import sql

        return sql.SQL(template).format(s=sql.Identifier(self.db.schema))

    def load(self) -> RoutingState:
        row = self.db.conn().execute(self._q("SELECT state FROM {s}.routing WHERE id = 1")).fetchone()
        if row is None:
            return RoutingState()
        try:
            state = RoutingState.model_validate(row[0])
        except ValueError as exc:
            raise RoutingStateDamaged(
                f"the routing row in {self.db.url}",
                state_defect(exc),
                "correct it, or delete the row to start again from the default routes",
            ) from None
        for role, route in default_routes().items():
            state.roles.setdefault(role, route)
        return state

    def save(self, state: RoutingState) -> None:
        self.db.conn().execute(
            self._q(
                "INSERT INTO {s}.routing (id, state) VALUES (1, %s) ON CONFLICT (id) DO UPDATE "
                "SET state = EXCLUDED.state, updated_at = now()"
            ),
            (state.model_dump_json(),),
        )

    @contextlib.contextmanager
    def _changing_state(self) -> Iterator[None]:
        """One transaction holding the routing row (and this process's turn), so
        read-modify-writes from two servers (a policy change, a key push's record, a job's
        batch history) never lose each other's change."""
        conn = self.db.conn()
        with self._changing, conn.transaction():
            conn.execute(
                self._q("INSERT INTO {s}.routing (id, state) VALUES (1, %s) ON CONFLICT (id) DO NOTHING"),
                (RoutingState().model_dump_json(),),
            )
            conn.execute(self._q("SELECT 1 FROM {s}.routing WHERE id = 1 FOR UPDATE"))
            yield
