"""A `file://` git remote followed to what git would really read.

An allow-list entry such as `file:///srv/allowed/` names a folder, but git does not read a
remote by its name: it opens the path (`P/.git`, `P`, `P.git/.git` or `P.git`, in that order, as
git's own `enter_repo` does), follows a symbolic link anywhere on the way, follows a `.git`
FILE's `gitdir: ELSEWHERE`, a linked worktree's `commondir`, and serves objects from every
repository listed in `objects/info/alternates` (and theirs, a few levels deep). Any of these
placed inside the allowed folder would let a remote named inside it read a repository outside
it. So, as `FATHOM_INDEX_ROOTS` is compared by real paths (`fathom.index.walking.roots`):

* `reach(path)` finds the repository git opens at `path` (its real folder) and every real
  path it would read through: the repository's own folder, the `gitdir:` target, the common
  folder, each alternate object folder, and the target of every link inside any of them.
* The caller (`git_source.check_remote`) refuses the remote unless all of them lie inside the
  real folder of an allowed `file://` entry, and hands git the real folder of the repository,
  never the name it was given, so git's search and ours cannot disagree.

What it refuses to do: judge the allow-list itself, run git, or promise anything against a
user who can write inside the allowed folder while a fetch runs (a link swapped in between
this check and git's open of the same path is not seen: the folder is that user's).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

# The order in which git tries a local remote's path (`enter_repo` in git's path.c).
SUFFIXES = ("/.git", "", ".git/.git", ".git")
# Alternates listing alternates: git follows five levels (`link_alt_odb_entries`).
ALTERNATE_DEPTH = 5
# A gitfile or an alternates file bigger than this is not one git wrote: it is read no further.
POINTER_BYTES = 64 * 1024


@dataclass
class Reach:
    """The repository git opens at a local path (None: none there, git will refuse it), and
    every real path it reads through."""

    git_dir: Path | None
    paths: list[Path] = field(default_factory=list)


def reach(path: str) -> Reach:
    """What git reads when given the local remote `path` (absolute, as the URL names it)."""
    git_dir = _open(path)
    if git_dir is None:
        return Reach(None, [Path(os.path.realpath(path))])
    found = Reach(git_dir, [git_dir])
    common = _pointer(git_dir / "commondir")
    folders = [git_dir]
    if common is not None:
        common_dir = Path(os.path.realpath(git_dir / common))
        found.paths.append(common_dir)
        folders.append(common_dir)
    for folder in list(folders):
        for alternate in _alternates(folder / "objects", ALTERNATE_DEPTH):
            found.paths.append(alternate)
            folders.append(alternate)
    for folder in folders:
        found.paths.extend(_link_targets(folder))
    return found


def _open(path: str) -> Path | None:
    """The real folder of the repository git opens at `path`: the first suffix that names a
    regular file (a gitfile) or a folder that holds a repository; None when none does."""
    for suffix in SUFFIXES:
        candidate = path + suffix
        try:
            st = os.stat(candidate)  # follows links, as git's stat does
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            target = _gitfile(Path(candidate))
            return Path(os.path.realpath(target if target is not None else candidate))
        if stat.S_ISDIR(st.st_mode) and _is_repository(Path(candidate)):
            return Path(os.path.realpath(candidate))
    return None


def _is_repository(folder: Path) -> bool:
    """git's test, loosely: a HEAD, and objects here or through a common folder."""
    return (folder / "HEAD").is_file() and ((folder / "objects").is_dir() or (folder / "commondir").is_file())


def _read_small(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read(POINTER_BYTES + 1)
    except OSError:
        return None
    return data.decode("utf-8", "surrogateescape") if len(data) <= POINTER_BYTES else None


def _gitfile(path: Path) -> Path | None:
    """The folder a `.git` file's `gitdir: X` line names (relative to the file's folder)."""
    text = _read_small(path)
    if text is None or not text.startswith("gitdir:"):
        return None
    target = text.splitlines()[0].removeprefix("gitdir:").strip()
    return path.parent / target if target else None


def _pointer(path: Path) -> str | None:
    return (_read_small(path) or "").strip() or None


def _alternates(objects: Path, depth: int) -> list[Path]:
    """The real object folders `objects/info/alternates` lists (relative ones resolved from
    `objects`, as git does), and theirs, `depth` levels deep."""
    text = _read_small(objects / "info" / "alternates")
    if text is None or depth <= 0:
        return []
    found: list[Path] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if len(line) > 1 and line[0] == line[-1] == '"':
            line = line[1:-1]  # git's quoted form; its escapes are not needed to find the folder
        real = Path(os.path.realpath(objects / line))
        found.append(real)
        found.extend(_alternates(real, depth - 1))
    return found


def _link_targets(folder: Path) -> list[Path]:
    """The real target of every symbolic link under `folder` (links are not walked into):
    a repository whose `objects` or `refs` is a link reads the folder the link names. Its
    `hooks` are left out: serving a fetch runs none of them, and a server's repositories often
    link them to a shared folder."""
    targets = []
    for parent, dirs, files in os.walk(folder):
        if parent == str(folder):  # `hooks`, a folder or a link to one, is not looked into
            dirs[:] = [d for d in dirs if d != "hooks"]
            files = [f for f in files if f != "hooks"]
        for name in [*dirs, *files]:
            entry = os.path.join(parent, name)
            if os.path.islink(entry):
                targets.append(Path(os.path.realpath(entry)))
    return targets
