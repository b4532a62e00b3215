"""The files that say who owns one LanceDB project: its folder's name, its pointer file
(state.json) read and checked, the flock that serialises its read-modify-writes, and its index
lock.

The index lock is an OS lock (flock) on a file, holder recorded in it: one writer per project across processes (CLI runs, servers, a file watcher). The lock is taken
without waiting: a second writer gets `ProjectLocked` at once, naming the holder recorded in
the file. The kernel releases the lock when its holder dies, however it dies, so a stale file
from a killed run is simply taken over (its record is overwritten).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fathom.index.store.errors import DamagedProject, LockHolder, ProjectLocked
from fathom.index.store.lance_tables import short


def project_slug(project: str) -> str:
    """The folder name of a project: the name itself when it is a safe one, else a safe
    prefix and a hash of the name (two names never share a folder)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", project).strip(".")[:64] or "project"
    if safe == project:
        return safe
    return f"{safe}-{hashlib.sha256(project.encode()).hexdigest()[:10]}"


def named_projects(root: Path) -> list[str]:
    """The names of the projects under the data dir `root`, sorted, each from its pointer
    file (its folder's name when the file cannot say)."""
    names = []
    for state_file in (root / "projects").glob("*/state.json"):
        name = state_file.parent.name
        with contextlib.suppress(OSError, ValueError, AttributeError):
            name = str(json.loads(state_file.read_text()).get("project") or name)
        names.append(name)
    return sorted(names)


def read_state_file(path: Path, project: str) -> dict[str, Any] | None:
    """The project's pointer file; None only when there is none. A garbled one is damage,
    never "no project": reading it as empty would hide (or overwrite) a whole index."""
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise DamagedProject(project, f"{path} is unreadable ({short(exc)})") from None
    if not (
        isinstance(state, dict)
        and isinstance(state.get("tables"), dict)
        and isinstance(state.get("next"), int)
    ):
        raise DamagedProject(project, f"{path} does not hold a project state")
    return state


@contextlib.contextmanager
def state_flock(path: Path) -> Iterator[None]:
    """Hold the flock on `path` (created if needed) for the block, waiting for it."""
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def hold_index_lock(
    path: Path, project: str, holder: str | None, clock: Callable[[], float]
) -> Iterator[LockHolder]:
    """Hold the lock file `path` of `project` for the block, or raise `ProjectLocked`."""
    host = socket.gethostname()
    holder = holder or f"fathom@{host}:{os.getpid()}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            raise ProjectLocked(project, read_lock_record(project, path)) from None
        since = datetime.fromtimestamp(clock(), tz=UTC)
        info = LockHolder(project, holder, host, os.getpid(), since)
        record = json.dumps(
            {"holder": holder, "host": host, "pid": info.pid, "since": since.isoformat()}
        ).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
        try:
            yield info
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def index_lock_holder(path: Path, project: str) -> LockHolder | None:
    """Who holds the lock file `path` now, or None."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return read_lock_record(project, path)
    finally:
        os.close(fd)  # closing drops a lock this probe took
    return None


def read_lock_record(project: str, path: Path) -> LockHolder | None:
    # The holder writes its record right after taking the lock; give it a moment.
    for _ in range(20):
        try:
            data = json.loads(path.read_text() or "null")
            if data:
                return LockHolder(
                    project,
                    str(data["holder"]),
                    str(data["host"]),
                    int(data["pid"]),
                    datetime.fromisoformat(data["since"]),
                )
        except (OSError, ValueError, KeyError, TypeError):
            pass
        time.sleep(0.01)
    return None
