"""The store's typed errors: each names what is wrong with a project's index and what to do.

Every one is a `StoreError` (fathom.errors); `WidthMismatch`, `NotCleared` and `DiskFull` live
in fathom.errors with the rest of the product's errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from fathom.errors import StoreError, did_you_mean
from fathom.space import Space


class SpaceMismatch(StoreError):
    """A table was opened, or written, as a different vector space than the one it holds."""

    def __init__(self, project: str, table: str, expected: Space, got: Space):
        self.project, self.table, self.expected, self.got = project, table, expected, got
        super().__init__(
            f"project {project!r} table {table!r} holds the space of {expected.model!r} "
            f"(reference {expected.reference!r}, width {expected.width}); it was opened as "
            f"{got.model!r} (reference {got.reference!r}, width {got.width}). Use the table's "
            f"own encoder, or run a full re-index to build the table in the new space."
        )


class UnknownProject(StoreError):
    def __init__(self, project: str, known: Sequence[str] = ()):
        self.project, self.known = project, list(known)
        hint = f" Known projects: {', '.join(self.known)}." if self.known else ""
        super().__init__(
            f"no project {project!r} in the store.{did_you_mean(project, self.known)} Index it first (`fathom index PATH "
            f"--project {project}`).{hint}"
        )


class DamagedProject(StoreError):
    """A project's stored state cannot be read as it should: a garbled state.json, a table
    folder gone, a data or manifest file truncated or corrupt. Never read as "empty"."""

    def __init__(self, project: str, detail: str):
        self.project, self.detail = project, detail
        super().__init__(
            f"project {project!r} is damaged: {detail}. Run `fathom store verify {project} "
            f"--repair` to fix what can be fixed (then `fathom index ROOT --project {project}` "
            f"re-embeds only what is missing). Other projects are unaffected."
        )


class DuplicateChunks(StoreError):
    """A shadow slot holds one chunk id more than once (two writers raced, or damage): it is
    never promoted."""

    def __init__(self, project: str, table: str, rows: int, ids: int):
        self.project, self.table, self.rows, self.ids = project, table, rows, ids
        super().__init__(
            f"project {project!r} table {table!r}: the rebuilt table holds {rows} rows for "
            f"{ids} chunk ids, so it was not promoted and was discarded; the active index is "
            f"unchanged. Run the same `fathom index --full` again to rebuild it."
        )


@dataclass(frozen=True)
class LockHolder:
    project: str
    holder: str  # the process's name (`fathom@HOST:PID` unless given)
    host: str
    pid: int
    since: datetime


class ProjectLocked(StoreError):
    """Another Fathom process (a server, a CLI run) is indexing this project now."""

    def __init__(self, project: str, holder: LockHolder | None):
        self.project, self.holder = project, holder
        if holder is not None:
            who = (
                f"Fathom process {holder.holder!r} (host {holder.host}, pid {holder.pid}), "
                f"indexing since {holder.since.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
            )
        else:
            who = "another Fathom process (it did not record its name)"
        super().__init__(
            f"project {project!r} is being indexed by {who}. Two writers never index one "
            f"project at once: wait for that job to finish, or stop it, then retry. "
            f"Searching the project works meanwhile."
        )


class NoShadow(StoreError):
    def __init__(self, project: str, table: str):
        self.project, self.table = project, table
        super().__init__(
            f"project {project!r} table {table!r} has no shadow slot being built; call "
            f"begin_shadow() first (a full re-index starts one)."
        )
