"""What a git project may write under the data dir, and how: bounded, and private.

A remote is untrusted input measured in bytes: a 1.2 MB repository can hold a 1 GiB file of
zeros (git's compression makes it nearly free to send), and `git archive` writes files with
the archive's modes (0644, 0755), whatever the process umask. So:

* `GitLimits`: the operator's bounds. A file of a commit larger than FATHOM_GIT_MAX_FILE_BYTES
  is never written (the walker would skip it as too large anyway); a commit whose other files
  take more than FATHOM_GIT_MAX_TREE_BYTES is refused; a fetch that would make the clone
  larger than FATHOM_GIT_MAX_FETCH_BYTES is stopped. Each refusal is a `GitTooLarge` naming
  its setting.
* `Plan`: every blob of a commit with its size, read from `git ls-tree -r -l` before anything
  is written, so an over-size file is left out of the archive git is asked for (git never
  inflates it) and a tree over its bound is refused before the first byte lands.
* `write_archive`: a `git archive` stream written member by member: each path passes tar's
  `data` filter (nothing outside the folder, no device, no link leaving it), each file is
  made 0600 and each folder 0700, and each member's size is checked again as it arrives
  (nothing the plan did not foresee is written past the bounds).
* The fetch's bound: the `git` process runs under a file-size limit (`ulimit -f`) of the room
  the clone has left, with every fetched object kept in one pack (`unpackLimit=1`), so no file
  git writes can pass it; the partial pack of a stopped fetch is removed.

What it refuses to do: run git (`fathom.index.git_source.GitRepo` does, and calls these), or
decide which commit to write (`fathom.service.git_projects`).
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from fathom.config import Settings
from fathom.errors import ConfigError

FILE_MODE, DIR_MODE = 0o600, 0o700
# Git's in-tree attributes that would make an archive differ from the blobs the plan measured
# (`export-subst` expands `$Format:…$`, `filter` runs a smudge driver, `eol`/`text`/`ident`/
# `working-tree-encoding` rewrite content, `export-ignore` leaves files out): all turned off
# by the clone's own `info/attributes`, which outranks any `.gitattributes` in the tree.
ATTRIBUTES = "* -export-subst -export-ignore -filter -ident -text -eol -working-tree-encoding\n"
_BLOCK = 512  # `ulimit -f` counts 512-byte blocks in a POSIX shell
# Paths per `git archive` call: a diff of thousands of files is written out in slices, each
# command line well under the system's limit (and the exclusions of a whole commit's too-large
# files go in one call while they fit in this many characters).
ARCHIVE_SLICE = 500
EXCLUSION_CHARS = 256 * 1024


class GitTooLarge(ConfigError):
    """A commit or a fetch past one of the operator's bounds; `setting` names it."""

    def __init__(self, message: str, setting: str):
        super().__init__(message)
        self.setting = setting


def _default(name: str) -> int:
    value: int = Settings.model_fields[name].default
    return value


@dataclass(frozen=True)
class GitLimits:
    """The bounds, in bytes; the settings' defaults (`fathom.config`) unless given."""

    max_file_bytes: int = _default("git_max_file_bytes")
    max_tree_bytes: int = _default("git_max_tree_bytes")
    max_fetch_bytes: int = _default("git_max_fetch_bytes")


@dataclass
class Exported:
    """What an export wrote: how many files, and the paths left out as too large."""

    written: int = 0
    too_large: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Plan:
    """Every blob (file or link) of `commit` with its size, and the bounds it is held to."""

    commit: str
    sizes: dict[str, int]
    limits: GitLimits

    @classmethod
    def parse(cls, out: bytes, commit: str, limits: GitLimits) -> Plan:
        """The plan `git ls-tree -r -l -z` printed: `MODE TYPE OBJECT SIZE<TAB>PATH` per entry
        (a submodule's entry, type `commit`, has no blob and is left out)."""
        sizes = {}
        for entry in out.decode("utf-8", "surrogateescape").split("\0"):
            meta, tab, path = entry.partition("\t")
            parts = meta.split()
            if tab and len(parts) == 4 and parts[1] == "blob" and parts[3].isdigit():
                sizes[path] = int(parts[3])
        return cls(commit, sizes, limits)

    def too_large(self, paths: Iterable[str] | None = None) -> list[str]:
        cap = self.limits.max_file_bytes
        return sorted(p for p in (self.sizes if paths is None else paths) if self.sizes.get(p, 0) > cap)

    def wanted(self, paths: Iterable[str] | None = None) -> list[str]:
        """The paths (all, or those given that the commit holds) within the per-file bound."""
        cap = self.limits.max_file_bytes
        return [
            p for p in (self.sizes if paths is None else paths) if p in self.sizes and self.sizes[p] <= cap
        ]

    def pathspecs(self, paths: Sequence[str] | None = None) -> list[list[str]]:
        """The pathspecs of the `git archive` calls that write `paths` (None: the whole commit)
        less the too-large files, which git is never asked for: one call for a whole commit
        (with its too-large files excluded), slices of literal paths otherwise."""
        if paths is None:
            excluded = [f":(exclude,literal){p}" for p in self.too_large()]
            if sum(map(len, excluded)) <= EXCLUSION_CHARS:
                return [excluded]  # none: the whole commit, in one archive
        wanted = self.wanted(paths)
        return [literal(wanted[i : i + ARCHIVE_SLICE]) for i in range(0, len(wanted), ARCHIVE_SLICE)]

    def check(self, remote: str) -> None:
        """`GitTooLarge` when the files within the per-file bound pass the tree's bound."""
        total = sum(s for s in self.sizes.values() if s <= self.limits.max_file_bytes)
        if total > self.limits.max_tree_bytes:
            raise tree_too_large(self.commit, remote, total, self.limits)


def tree_too_large(commit: str, remote: str, total: int, limits: GitLimits) -> GitTooLarge:
    return GitTooLarge(
        f"commit {commit[:12]} of {remote} holds {total} bytes of files (those of at most "
        f"FATHOM_GIT_MAX_FILE_BYTES={limits.max_file_bytes} bytes each), more than "
        f"FATHOM_GIT_MAX_TREE_BYTES={limits.max_tree_bytes}: nothing of it was written. Raise "
        f"FATHOM_GIT_MAX_TREE_BYTES if the repository is meant to be that large",
        "FATHOM_GIT_MAX_TREE_BYTES",
    )


def fetch_too_large(remote: str, limits: GitLimits) -> GitTooLarge:
    return GitTooLarge(
        f"fetching {remote} would make its clone larger than FATHOM_GIT_MAX_FETCH_BYTES="
        f"{limits.max_fetch_bytes} bytes: the fetch was stopped and what it had received "
        f"removed (the branches indexed before keep serving). Raise FATHOM_GIT_MAX_FETCH_BYTES "
        f"if the repository is meant to be that large",
        "FATHOM_GIT_MAX_FETCH_BYTES",
    )


def literal(paths: Sequence[str]) -> list[str]:
    """Pathspecs that match exactly these paths: a file named `*.py` is that file, not a glob."""
    return [f":(literal){p}" for p in paths]


def private_folder(path: Path) -> None:
    """`path` and every missing folder above it made 0700, whatever the umask."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        folder.mkdir(mode=DIR_MODE, exist_ok=True)
        os.chmod(folder, DIR_MODE)


def _private_member(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    try:
        member = tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        return None  # a link out of the tree, an absolute path: not written
    if member.issym() or member.islnk():
        return member
    return member.replace(mode=DIR_MODE if member.isdir() else FILE_MODE, deep=False)


def write_archive(
    stream: IO[bytes], folder: Path, plan: Plan, done: Exported, *, remote: str, written_bytes: int = 0
) -> int:
    """Write the members of a tar stream into `folder` as they arrive, into `done`; returns the
    bytes written so far (`written_bytes` before this stream)."""
    limits = plan.limits
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            if member.isfile() and member.size > limits.max_file_bytes:
                done.too_large.append(member.name)  # tar reads past its data; nothing written
                continue
            if member.isfile():
                written_bytes += member.size
                if written_bytes > limits.max_tree_bytes:
                    raise tree_too_large(plan.commit, remote, written_bytes, limits)
            tar.extract(member, folder, filter=_private_member)
            done.written += not member.isdir()
    return written_bytes


def folder_bytes(path: Path) -> int:
    """The bytes of every file under `path` (links not followed)."""
    total = 0
    for parent, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(parent, name)).st_size
            except OSError:
                continue
    return total


def file_size_limited(command: list[str], max_bytes: int) -> list[str]:
    """`command` run under a limit on the size of any file it (or a child) writes."""
    blocks = max(1, max_bytes // _BLOCK)
    return ["sh", "-c", 'ulimit -f "$1" && shift && exec "$@"', "sh", str(blocks), *command]


def clear_partial_fetch(repo: Path, max_bytes: int) -> bool:
    """Remove the temporary packs a stopped fetch left in `repo`; whether one of them had
    reached the file-size limit `max_bytes` (the fetch was stopped by its bound)."""
    reached = False
    pack = repo / "objects" / "pack"
    limit = max(1, max_bytes // _BLOCK) * _BLOCK
    for entry in pack.glob("tmp_*") if pack.is_dir() else ():
        try:
            reached |= entry.lstat().st_size >= limit
            entry.unlink()
        except OSError:
            continue
    return reached
