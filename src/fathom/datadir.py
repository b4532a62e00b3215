"""The data dir at rest: only the user who runs Fathom can read it.

The data dir holds indexed text (LanceDB tables under `lance/`, secrets the walker missed
included), tokens' hashes, the audit log, the job records and the routing state. Any other
local user who could list it could grep that text, so:

- every entry point that writes it (`fathom …`, `python -m fathom.server`, `python -m
  fathom.fleet.agent`, the demo) sets the process umask to 0o077 (`private_umask`) before
  anything is created, so whatever writes there (our code, LanceDB's native writer, numpy)
  makes folders 0700 and files 0600;
- `open_data_dir` creates the data dir 0700 and, on its first opening in a process, takes the
  group and other bits off every folder and file under it that has them (an index written by
  an older release, a copy restored from a backup), with one log line saying how many. A
  folder that is 0700 already keeps everything under it from other users even when a library
  used as a library (no umask set) writes a file 0644 into it.

It refuses to follow a symbolic link while tightening: a link inside the data dir may point
anywhere (a project folder, /etc) and its target is not Fathom's to change. Nothing here
concerns a PostgreSQL store: its rows live in the database, under the database's own access
rules; the data dir's own files are tightened all the same.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from pathlib import Path

log = logging.getLogger(__name__)

# Group and other bits: none of them on anything under the data dir.
SHARED_BITS = 0o077
PRIVATE_UMASK = 0o077
DIR_MODE = 0o700
FILE_MODE = 0o600

_opened: set[str] = set()  # data dirs already tightened by this process
_opening = threading.Lock()


def private_umask() -> None:
    """Every file and folder this process creates from now on is its user's alone."""
    os.umask(PRIVATE_UMASK)


def open_data_dir(data_dir: Path) -> Path:
    """Create `data_dir` (0700) if needed and, once per process, tighten what is under it."""
    path = Path(data_dir).expanduser()
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    key = os.path.realpath(path)
    with _opening:
        if key in _opened:
            return path
        _opened.add(key)
    tightened, refused = tighten(path)
    if tightened:
        log.warning(
            "data dir %s: took group and other access off %d path(s) (folders are now 0700, "
            "files 0600): other users of this machine could read them",
            path,
            tightened,
        )
    if refused:
        log.warning(
            "data dir %s: %d path(s) under it could not be made private (owned by another user?); "
            "`chmod -R go= %s` as their owner",
            path,
            refused,
            path,
        )
    return path


def tighten(root: Path) -> tuple[int, int]:
    """Take the group and other bits off `root` and every folder and file under it, never through
    a symbolic link; (paths changed, paths that could not be changed)."""
    changed = refused = 0
    # Iterative: a data dir is shallow, but a walk must not fail on one that is not.
    pending = [os.path.realpath(root)]
    first = True
    while pending:
        folder = pending.pop()
        if first:
            first = False
            c, r = _private(folder)
            changed, refused = changed + c, refused + r
        try:
            entries = list(os.scandir(folder))
        except OSError:
            refused += 1
            continue
        for entry in entries:
            try:
                if entry.is_symlink():
                    continue
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                refused += 1
                continue
            c, r = _private(entry.path)
            changed, refused = changed + c, refused + r
            if is_dir:
                pending.append(entry.path)
    return changed, refused


def _private(path: str) -> tuple[int, int]:
    """Tighten one path that is not a link: (1, 0) changed, (0, 0) already private, (0, 1) refused."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode) or not st.st_mode & SHARED_BITS:
            return 0, 0
        os.chmod(path, stat.S_IMODE(st.st_mode) & ~SHARED_BITS)
    except OSError:
        return 0, 1
    return 1, 0
