"""The few records the service keeps of each project, and the rules on which folder a caller
may index.

It owns `projects.json` under the data dir (`ProjectRecords`: each project's root folder, its
last run, its `include` globs and whether it is watched), the check of `include` globs, the
checks of a folder asked to be indexed and the project name it gets (`index_target`), whether
a project has been indexed yet (`indexed_before`), the rule that a scoped caller may not
index another project's folder (`check_not_taken`), and the rule that no folder is indexed
under the name of a project from git or one of its branches (`check_not_from_git`: their
indexes follow the remote), and each project's summary (`summaries`), one whose first index
is still running included. It refuses to index anything or to read
the store: `Fathom` does both.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from fathom import scope
from fathom.config import atomic_write_text
from fathom.errors import ConfigError
from fathom.index.indexer import check_project_root
from fathom.index.job import Job, progress_line

log = logging.getLogger("fathom.service")


class FolderTaken(ConfigError):
    """The folder belongs to a project the caller does not hold. The message never names that
    project: a scoped caller learns nothing of projects outside its scope."""

    def __init__(self, path: str, relation: str):
        self.path, self.relation = path, relation
        what = {
            "is": "is the folder of",
            "lies inside": "lies inside the folder of",
            "contains": "contains the folder of",
        }[relation]
        super().__init__(
            f"refusing to index {path}: it {what} another project, which this token does not "
            f"hold. Index a folder of your own project, or ask the operator for a token that "
            f"holds that project (`fathom tokens create --name NAME --project PROJECT "
            f"--can-index`)"
        )


MAX_INCLUDES = 50


def check_includes(include: Any) -> list[str]:
    """`include` globs as given to `fathom index --include`: strings, gitignore syntax."""
    if (
        isinstance(include, str)
        or not isinstance(include, (list, tuple))
        or len(include) > MAX_INCLUDES
        or not all(isinstance(g, str) and g.strip() and len(g) <= 500 and "\x00" not in g for g in include)
    ):
        raise ConfigError(
            f"include must be a list of at most {MAX_INCLUDES} globs (gitignore "
            f"syntax, e.g. `vendor/mylib/` or `build/**/*.py`)"
        )
    return [g.strip() for g in include]


class ProjectRecords:
    """Each project's root folder and last run summary, in `projects.json`: atomic writes, and
    each read-modify-write under a lock file, so two processes finishing runs at once (a CLI
    and a server) never lose each other's record."""

    LOCK_SECONDS = 30.0

    def __init__(self, data_dir: Path):
        self.path = Path(data_dir) / "projects.json"
        self._lock = FileLock(str(self.path) + ".lock", timeout=self.LOCK_SECONDS)

    def load(self) -> dict[str, dict[str, Any]]:
        try:
            # Written only by `save`: an object of records by project name.
            records: dict[str, dict[str, Any]] = json.loads(self.path.read_text())
            return records
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{self.path} is unreadable ({exc}); remove it, then re-index") from exc

    def get(self, project: str) -> dict[str, Any] | None:
        return self.load().get(project)

    @contextlib.contextmanager
    def _changing(self) -> Iterator[dict[str, dict[str, Any]]]:
        """The records for one read-modify-write, under the lock; written back on exit."""
        try:
            with self._lock:
                records = self.load()
                before = json.dumps(records, sort_keys=True)
                yield records
                if json.dumps(records, sort_keys=True) != before:
                    atomic_write_text(self.path, json.dumps(records, indent=2, sort_keys=True))
        except Timeout:
            raise ConfigError(
                f"{self.path} stayed locked for {self.LOCK_SECONDS:.0f}s by another Fathom "
                f"process; if none is running, remove {self._lock.lock_file}"
            ) from None

    def put(self, project: str, record: dict[str, Any]) -> None:
        with self._changing() as records:
            records[project] = record

    def update(self, project: str, **fields: Any) -> dict[str, Any]:
        """Merge `fields` into the project's record (other fields kept)."""
        with self._changing() as records:
            record = (records.get(project) or {}) | fields
            records[project] = record
        return record

    def remove(self, project: str) -> None:
        with self._changing() as records:
            records.pop(project, None)


@dataclass(frozen=True)
class IndexTarget:
    root: Path  # the folder as given (`~` expanded)
    real: Path  # its real path, links followed
    name: str  # the project it is indexed into


def index_target(
    records: ProjectRecords, settings: Any, path: str | Path, project: str | None, *, from_git: bool = False
) -> IndexTarget:
    """Every check of a folder asked to be indexed, before anything is probed, loaded or
    started (blocking: it reads the records): it exists, is a folder and no system folder,
    is not the data dir, gives a project name, is no other project's for a scoped caller,
    and (unless the git side indexes its own tree, `from_git`) the name is not a git
    project's nor a branch's. Raises a `ConfigError` naming the fix."""
    root = Path(path).expanduser()
    real = check_project_root(root, settings.refused_roots)
    name = project or root.resolve().name
    if not name:
        raise ConfigError(f"cannot name a project after {path}; pass --project NAME")
    if real == settings.data_dir.expanduser().resolve():
        raise ConfigError(
            f"refusing to index {path}: it is this server's data dir (its "
            f"indexes and state), not a project; give a project folder"
        )
    check_not_taken(records, path, real)
    if not from_git:
        check_not_from_git(records.get(name), name)
    return IndexTarget(root, real, name)


def check_not_from_git(record: dict[str, Any] | None, project: str) -> None:
    """Refuse to index a folder as `project` when `project` (its `record`) is a project from
    git or a branch of one: a folder would replace the remote's files in its index, and the
    next sync would put them back."""
    record = record or {}
    overlay = record.get("overlay")
    if record.get("git"):
        what, of = "comes from git", project
    elif overlay:
        what, of = (
            f"is the index of branch {overlay.get('branch')!r} of the git project "
            f"{overlay.get('of')!r}: it comes from git",
            str(overlay.get("of")),
        )
    else:
        return
    raise ConfigError(
        f"refusing to index a folder as {project!r}: the project {what} and "
        f"follows its remote (the push webhook, its poll or `fathom projects sync "
        f"{of}`); index the folder under another name"
    )


def indexed_before(records: ProjectRecords, project: str) -> bool:
    """Whether a run of `project` has finished before (its record holds a last run)."""
    return bool((records.get(project) or {}).get("last_run"))


def lenders_of(records: ProjectRecords, project: str) -> tuple[str, ...]:
    """The projects whose vectors an index of `project` may carry by content: the other
    branches of its git project (`fathom.service.git_projects`)."""
    return tuple((records.get(project) or {}).get("lenders") or ())


def check_not_taken(records: ProjectRecords, path: str | Path, real: Path) -> None:
    """A caller who sees only some projects (a scoped MCP token) may index only a folder
    that is no other project's: not another project's root, not inside one, and not a
    folder holding one (which would read it too). Raises `FolderTaken`; outside a scope
    (the operator) every folder may be indexed."""
    held = scope.current()
    if held is None:
        return
    for project, record in records.load().items():
        other = record.get("root")
        if project in held or not other:
            continue
        for theirs in {Path(other), Path(os.path.realpath(other))}:
            if real == theirs or real.is_relative_to(theirs) or theirs.is_relative_to(real):
                raise FolderTaken(
                    str(path),
                    "is" if real == theirs else "lies inside" if real.is_relative_to(theirs) else "contains",
                )


@dataclass(frozen=True)
class IndexStatus:
    """One project's index as `fathom status` and the admin API show it (`Fathom.index_status`)."""

    project: str
    root: str | None
    tables: dict[str, dict[str, Any]]
    last_run: dict[str, Any] | None
    jobs: list[dict[str, Any]] = field(default_factory=list)
    store: str | None = None  # where the index lives (a URL's password redacted)
    watch: dict[str, Any] = field(default_factory=dict)  # live sync: Fathom.watch_state
    include: list[str] = field(default_factory=list)  # the project's include globs
    state: str = "indexed"  # or indexing: a run builds its index now (a first one: no tables yet)
    progress: str | None = None  # how far that run is (`fathom.index.job.progress_line`)


@dataclass(frozen=True)
class ProjectSummary:
    name: str
    root: str | None
    tables: dict[str, int]  # active rows per table
    last_indexed: str | None  # ISO 8601, UTC
    indexing: bool = False  # a shadow (an unfinished full run) exists, or a run builds it now
    damaged: str | None = None  # why the project cannot be read (it is skipped by searches)
    state: str = "indexed"  # indexed, indexing (a run builds it now: `progress`), damaged
    progress: str | None = None  # how far that run is (`fathom.index.job.progress_line`)
    job: str | None = None  # that run's id


def summaries(book: ProjectRecords, store: Any, building: Sequence[Job] = ()) -> list[ProjectSummary]:
    """Every project in `store`, with its root from the records (a damaged one: why), and
    every project a run in `building` is building now: one being indexed for the first time
    has no table yet, and is listed all the same, as `indexing`, with the run's progress."""
    try:
        records = book.load()
    except ConfigError as exc:
        log.warning("%s", exc)  # roots unknown; the projects themselves are still listed
        records = {}
    runs = {job.project: job for job in building}
    out = []
    for p in store.list_projects():
        root = (records.get(p.name) or {}).get("root")
        if p.damage:
            out.append(
                ProjectSummary(
                    name=p.name, root=root, tables={}, last_indexed=None, damaged=p.damage, state="damaged"
                )
            )
            continue
        last = [t.last_indexed for t in p.tables.values() if t.last_indexed is not None]
        run = runs.pop(p.name, None)
        out.append(
            ProjectSummary(
                name=p.name,
                root=root or (str(run.root) if run is not None else None),
                tables={t: info.rows for t, info in p.tables.items()},
                last_indexed=max(last).isoformat(timespec="seconds") if last else None,
                indexing=run is not None or any(info.shadow_rows is not None for info in p.tables.values()),
                **_running(run),
            )
        )
    # First indexes: nothing promoted yet, so the store does not list them.
    out += [
        ProjectSummary(
            name=name, root=str(run.root), tables={}, last_indexed=None, indexing=True, **_running(run)
        )
        for name, run in runs.items()
    ]
    return out


def _running(run: Job | None) -> dict[str, Any]:
    return {} if run is None else {"state": "indexing", "progress": progress_line(run), "job": run.id}
