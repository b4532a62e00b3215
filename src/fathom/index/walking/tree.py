"""A project's folders, opened through descriptors: no folder on the way to a file is resolved
again by its path once the walk has begun.

A walk lists a folder, then enters its subfolders and reads its files later. Between the two,
a subfolder can be exchanged for a symbolic link (`renameat2(RENAME_EXCHANGE)` does it
atomically, in a loop), and anything that then opens `root/dir/file` by its path reads through
the link, outside the project. So nothing of a project is opened by path here: the root is
opened once, one component at a time from `/`, none of them followed if it is a link (the
root's real path is resolved first: a link in the path the caller gave is the caller's
choice, and `roots.root_moved` judges it); every folder under it is opened by its name
relative to its parent's descriptor with `O_NOFOLLOW | O_DIRECTORY`, and every file by its name
relative to its folder's descriptor (`read.read_regular(name, dir_fd=)`). A component that
became a link fails to open, and what lay under it is counted as reached through a link
(`SYMLINK`) instead of being read. What is opened this way lies under the root by
construction, whatever changes on disk meanwhile. The root's identity (device, inode) is
pinned when it is first opened, so a root opened again later (a survey whose files are read
long after its listing) must be the very same folder.

Only a short chain of folder descriptors is held (the folder opened last and the folders above
it, `HELD` deep at most), so neighbouring files of a walk reuse it and a tree of any size or
depth holds a bounded number of descriptors.

It refuses to follow a link, to open anything of a project by path, and to run where the
system cannot open relative to a folder's descriptor without following links
(`WalkUnsupported`, which says so).
"""

from __future__ import annotations

import errno
import os
import stat
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from fathom.errors import ConfigError
from fathom.index.walking.read import Unreadable, read_regular
from fathom.index.walking.reasons import SYMLINK, UNREADABLE

# getattr: a system without them gets `WalkUnsupported` from `check_supported`, not an import error.
NOFOLLOW, DIRECTORY = getattr(os, "O_NOFOLLOW", 0), getattr(os, "O_DIRECTORY", 0)
FOLDER_FLAGS = os.O_RDONLY | DIRECTORY | NOFOLLOW | os.O_CLOEXEC
# The folders above the root are only passed through: `O_PATH` needs no read permission on
# them (a home folder of mode 0711 is passed, never listed).
_THROUGH = getattr(os, "O_PATH", os.O_RDONLY) | DIRECTORY | NOFOLLOW | os.O_CLOEXEC
HELD = 32  # folder descriptors kept open for the next read, at most

Identity = tuple[int, int]  # (st_dev, st_ino)


class WalkUnsupported(ConfigError):
    """The system lacks what a walk needs to read a project without following links."""

    def __init__(self, missing: Sequence[str]):
        self.missing = list(missing)
        super().__init__(
            f"this system cannot open a file relative to a folder without following symbolic "
            f"links ({', '.join(missing)} missing): Fathom reads a project only that way, so "
            f"that a folder swapped for a link is never followed out of the project. Run "
            f"Fathom on Linux (any kernel Python supports has O_NOFOLLOW, O_DIRECTORY and "
            f"dir_fd)."
        )


def check_supported() -> None:
    """`WalkUnsupported` naming what is missing, when a walk cannot be made safely here."""
    missing = [f"os.{flag}" for flag in ("O_NOFOLLOW", "O_DIRECTORY") if not hasattr(os, flag)]
    for call, where, name in (
        (os.open, os.supports_dir_fd, "os.open(dir_fd=)"),
        (os.stat, os.supports_dir_fd, "os.stat(dir_fd=)"),
        (os.scandir, os.supports_fd, "os.scandir(fd)"),
    ):
        if call not in where:
            missing.append(name)
    if missing:
        raise WalkUnsupported(missing)


def why_not(name: str, dir_fd: int) -> str:
    """The skip reason for the entry `name` of a folder that did not open as expected: a link
    (it was swapped for one) or anything else."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return UNREADABLE
    return SYMLINK if stat.S_ISLNK(info.st_mode) else UNREADABLE


def open_folder(name: str, dir_fd: int) -> int:
    """The folder `name` of the folder `dir_fd`, opened for listing without following a link;
    `Unreadable` (`SYMLINK` when it is one now) otherwise."""
    try:
        return os.open(name, FOLDER_FLAGS, dir_fd=dir_fd)
    except OSError:
        raise Unreadable(why_not(name, dir_fd)) from None


def read_beneath(dir_fd: int, names: Sequence[str], max_bytes: int) -> bytes | None:
    """The bytes of the file at `names` under the folder `dir_fd` (with `read_regular`'s
    refusals), each folder on the way opened by name without following a link; None when
    there is no such entry, or a folder on the way is missing or not a plain folder."""
    *folders, name = names
    fd, opened = dir_fd, []
    try:
        for folder in folders:
            try:
                fd = os.open(folder, FOLDER_FLAGS, dir_fd=fd)
            except OSError:
                return None
            opened.append(fd)
        try:
            os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return None
        return read_regular(name, max_bytes, dir_fd=fd)
    finally:
        for held in opened:
            os.close(held)


@dataclass
class _Held:
    """The descriptors a `Tree` holds, apart from it, so they are closed when it is dropped."""

    root: int | None = None
    chain: list[tuple[str, int]] = field(default_factory=list)  # the first folders of `deep`
    deep: tuple[tuple[str, ...], int] | None = None  # a folder below `HELD` levels

    def release(self) -> None:
        """Close the folders, keep the root."""
        for _, fd in self.chain:
            os.close(fd)
        self.chain.clear()
        if self.deep is not None:
            os.close(self.deep[1])
            self.deep = None

    def close(self) -> None:
        self.release()
        if self.root is not None:
            os.close(self.root)
            self.root = None


class Tree:
    """The folders under `root`, each opened through its parent's descriptor (see the module
    docstring). `folder(names)` gives the descriptor of the folder at those names under the
    root; it stays the tree's to close. Close with `close()` (or `with`); a tree dropped open
    closes its descriptors when it is collected."""

    def __init__(self, root: Path | str):
        check_supported()
        self.root = Path(root)
        self.identity: Identity | None = None
        self._held = _Held()
        self._closer = weakref.finalize(self, _Held.close, self._held)

    def __enter__(self) -> Tree:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close every descriptor; the tree opens its root again (the same one) if used."""
        self._held.close()

    def release(self) -> None:
        """Close the folders held for the next read, keep the root (a listing is done)."""
        self._held.release()

    def root_fd(self) -> int:
        """The root's descriptor; `Unreadable` when it cannot be opened without following a
        link, or is not the folder it was when first opened."""
        if self._held.root is None:
            fd = self._open_root()
            found = os.fstat(fd)
            if self.identity is None:
                self.identity = (found.st_dev, found.st_ino)
            elif (found.st_dev, found.st_ino) != self.identity:
                os.close(fd)
                raise Unreadable(UNREADABLE)  # another folder now stands at the root's path
            self._held.root = fd
        return self._held.root

    def _open_root(self) -> int:
        names = [n for n in os.path.realpath(self.root).split("/") if n]
        try:
            fd = os.open("/", _THROUGH if names else FOLDER_FLAGS)
        except OSError:
            raise Unreadable(UNREADABLE) from None
        try:
            for i, name in enumerate(names):
                flags = FOLDER_FLAGS if i == len(names) - 1 else _THROUGH
                try:
                    inner = os.open(name, flags, dir_fd=fd)
                except OSError as exc:
                    # ENOTDIR or ELOOP: a component became a link (or a file) after realpath.
                    raise Unreadable(
                        SYMLINK if exc.errno in (errno.ELOOP, errno.ENOTDIR) else UNREADABLE
                    ) from None
                os.close(fd)
                fd = inner
        except BaseException:
            os.close(fd)
            raise
        return fd

    def folder(self, names: Sequence[str]) -> int:
        """The descriptor of the folder at `names` (raw names from the root down; empty: the
        root), each opened by name in the one above it; `Unreadable` (`SYMLINK` when one of
        them is a link now) otherwise. Reuses what the last call opened."""
        held = self._held
        names = tuple(names)
        if held.deep is not None and held.deep[0] == names:
            return held.deep[1]
        fd = self.root_fd()
        kept = 0
        while kept < len(held.chain) and kept < len(names) and held.chain[kept][0] == names[kept]:
            kept += 1
        for _, old in held.chain[kept:]:
            os.close(old)
        del held.chain[kept:]
        if held.chain:
            fd = held.chain[-1][1]
        for name in names[kept:HELD]:
            fd = open_folder(name, fd)
            held.chain.append((name, fd))
        if len(names) <= HELD:
            return fd
        return self._deeper(names, fd)

    def _deeper(self, names: tuple[str, ...], fd: int) -> int:
        """A folder below the `HELD` levels kept open: the levels between are opened and closed
        on the way, only the folder itself is kept (until another deep one is asked for)."""
        held = self._held
        if held.deep is not None:
            os.close(held.deep[1])
            held.deep = None
        passing: int | None = None
        try:
            for name in names[HELD:]:
                inner = open_folder(name, fd)
                if passing is not None:
                    os.close(passing)
                passing = fd = inner
        except BaseException:
            if passing is not None:
                os.close(passing)
            raise
        held.deep = (names, fd)
        return fd

    def stat(self, names: Sequence[str]) -> os.stat_result | None:
        """The entry at `names` (the last one not followed if it is a link), or None when it
        or a folder on the way is missing or cannot be opened."""
        if not names:
            return os.fstat(self.root_fd())
        try:
            return os.stat(names[-1], dir_fd=self.folder(names[:-1]), follow_symlinks=False)
        except (OSError, Unreadable):
            return None
