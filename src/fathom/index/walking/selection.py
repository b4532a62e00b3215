"""Which paths of a project a walk takes, by path and name only: `.gitignore` semantics (the
root file, nested files, negation, `.git/info/exclude`, via `pathspec`'s gitwildmatch rules),
`.fathomignore` files (the project's own word, which comes first), the `include` globs and the
caller's `extra_ignores` (which win over every rule of the project).

`Selection` holds these decisions once, for the walk, for `read_one` and for the watcher,
which asks `Selection.admits(path)` of every changed file. It refuses to judge a file's bytes:
the walker adds the refusals that need them. The walk and `read_one` hand it each folder's
descriptor (`dir_fd`, from `walking.tree`), and the ignore files are then read by name in
that folder, never through a path a swapped link could redirect.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import pathspec

from fathom.index.secrets import secret_by_name
from fathom.index.walking.names import ALWAYS_SKIP_DIRS, is_virtualenv, reason_by_name
from fathom.index.walking.read import MAX_IGNORE_BYTES, Unreadable, read_regular
from fathom.index.walking.reasons import (
    EXCLUDED,
    FATHOMIGNORED,
    GITIGNORED,
    IGNORED_DIR,
)
from fathom.index.walking.tree import read_beneath

Rules = list[tuple[str, pathspec.GitIgnoreSpec]]
FATHOMIGNORE = ".fathomignore"
IGNORE_FILES = frozenset({".gitignore", FATHOMIGNORE})


@dataclass(frozen=True)
class Scope:
    """The rules in force in one directory: .gitignore and .fathomignore files from the root
    down, and whether only explicitly included paths are taken here (inside a skipped
    directory that an include glob reaches into)."""

    git: Rules
    fathom: Rules
    restricted: bool = False


class SelectionOptions(TypedDict):
    """A project's own part of its `Selection`, as the service keeps it (`Fathom.selection_of`):
    the keywords a `Selection` takes beyond the root."""

    include: list[str]
    extra_ignores: list[str]


class Selection:
    """Which paths of a project a walk takes: the built-in skips, `.gitignore`,
    `.fathomignore`, the `include` globs and the caller's `extra_ignores`. Decisions are by
    path and name only; the walker adds the refusals that need the file's bytes."""

    def __init__(self, root: Path, *, include: Iterable[str] = (), extra_ignores: Iterable[str] = ()):
        self.root = Path(root)
        self.include = [g.strip().replace("\\", "/") for g in include if g and g.strip()]
        self._include = pathspec.GitIgnoreSpec.from_lines(self.include)
        # The literal folders an include glob names before its first wildcard: a skipped
        # folder on the way to one of them is entered, taking only what the glob includes.
        self._prefixes = [literal_prefix(g) for g in self.include]
        self.extra = pathspec.GitIgnoreSpec.from_lines(list(extra_ignores))
        self._scopes: dict[str, Scope] = {}

    def forget(self) -> None:
        """Drop the cached ignore files (one changed)."""
        self._scopes.clear()

    def top(self, skipped: Counter[str] | None = None, *, dir_fd: int | None = None) -> Scope:
        """The rules above every folder (`.git/info/exclude`); `dir_fd`: the root's descriptor."""
        exclude = ".git/info/exclude"
        base = read_spec(self.root / exclude if dir_fd is None else exclude, skipped, dir_fd=dir_fd)
        return Scope([("", base)] if base is not None else [], [])

    def scope(
        self,
        directory: Path,
        rel: str,
        parent: Scope,
        restricted: bool | None = None,
        skipped: Counter[str] | None = None,
        *,
        dir_fd: int | None = None,
    ) -> Scope:
        """The rules in force in `directory` (`dir_fd`: its descriptor, to read its ignore
        files by name there)."""
        git, fathom = parent.git, parent.fathom
        spec = read_spec(directory / ".gitignore" if dir_fd is None else ".gitignore", skipped, dir_fd=dir_fd)
        if spec is not None:
            git = [*git, (rel, spec)]
        spec = read_spec(directory / FATHOMIGNORE if dir_fd is None else FATHOMIGNORE, skipped, dir_fd=dir_fd)
        if spec is not None:
            fathom = [*fathom, (rel, spec)]
        return Scope(git, fathom, parent.restricted if restricted is None else restricted)

    def included(self, rel: str, is_dir: bool) -> bool:
        return bool(self.include) and self._include.match_file(rel + "/" if is_dir else rel)

    def _reaches_into(self, rel: str) -> bool:
        return any(p == rel or p.startswith(rel + "/") for p in self._prefixes if p)

    def directory(self, name: str, rel: str, path: str, scope: Scope) -> tuple[str | None, bool]:
        """(skip reason or None, restricted) for a directory: None enters it."""
        if self.extra.match_file(rel + "/"):
            return EXCLUDED, False  # the caller's exclusions (the data dir) are not negotiable
        verdict = rule_verdict(scope.fathom, rel, is_dir=True)
        if verdict is True:
            return FATHOMIGNORED, False
        if verdict is False or self.included(rel, True):
            return None, False  # the project's word wins over every skip below
        if name in ALWAYS_SKIP_DIRS or name.endswith(".egg-info") or is_virtualenv(path):
            reason = IGNORED_DIR
        elif rule_verdict(scope.git, rel, is_dir=True):
            reason = GITIGNORED
        elif scope.restricted and not self._reaches_into(rel):
            return IGNORED_DIR, True  # inside a skipped folder, outside every include
        else:
            return None, scope.restricted
        if self._reaches_into(rel):
            return None, True
        return reason, False

    def file(self, name: str, rel: str, scope: Scope) -> tuple[str | None, bool]:
        """(skip reason or None, forced): forced when the project included it explicitly,
        which overrides the refusals by name (lock, generated and data file names)."""
        if self.extra.match_file(rel):
            return EXCLUDED, False
        verdict = rule_verdict(scope.fathom, rel, is_dir=False)
        if verdict is True:
            return FATHOMIGNORED, False
        if verdict is False or self.included(rel, False):
            return None, True
        if scope.restricted:
            return IGNORED_DIR, False
        if rule_verdict(scope.git, rel, is_dir=False):
            return GITIGNORED, False
        return None, False

    def taken_back(self, rel: str, scope: Scope | None = None) -> bool:
        """Whether a `.fathomignore` negation names the file at `rel` itself, which takes it
        back from the secret rules. A folder's negation (`!config/`) does not: a credential is
        read only where the project names it."""
        if scope is None:  # a single path (not from a walk): its folders' ignore files
            scope = self._cached_scope("", Path(self.root), None)
            folders = rel.split("/")[:-1]
            for i in range(len(folders)):
                sub = "/".join(folders[: i + 1])
                scope = self._cached_scope(sub, self.root / sub, scope)
        return names_file(scope.fathom, rel)

    def admits(self, rel: str, is_dir: bool = False) -> bool:
        """Whether a walk would consider the file (or folder) at `rel` (relative, POSIX): the
        watcher's filter. Ignore files themselves are admitted: a change to one changes the
        selection."""
        parts = [p for p in rel.split("/") if p]
        if not parts:
            return False
        scope = self._cached_scope("", Path(self.root), None)
        last = len(parts) if is_dir else len(parts) - 1
        for i, name in enumerate(parts[:last]):
            sub = "/".join(parts[: i + 1])
            reason, restricted = self.directory(name, sub, str(self.root / sub), scope)
            if reason is not None:
                return False
            scope = self._cached_scope(sub, self.root / sub, scope, restricted)
        if is_dir:
            return True
        if parts[-1] in IGNORE_FILES:
            return True
        reason, forced = self.file(parts[-1], rel, scope)
        if reason is None and secret_by_name(rel) and not self.taken_back(rel, scope):
            return False
        return reason is None and (forced or reason_by_name(parts[-1].lower()) is None)

    def _cached_scope(
        self, rel: str, directory: Path, parent: Scope | None, restricted: bool | None = None
    ) -> Scope:
        key = f"{rel}|{restricted}"
        scope = self._scopes.get(key)
        if scope is None:
            scope = self.scope(directory, rel, parent or self.top(), restricted)
            self._scopes[key] = scope
        return scope


def literal_prefix(glob: str) -> str:
    """The folders a glob names before its first wildcard: `vendor/lib/**` -> `vendor/lib`."""
    parts = []
    for part in glob.strip("/").split("/"):
        if any(c in part for c in "*?[!"):
            break
        parts.append(part)
    if parts and "/" not in glob.strip("/") and not glob.endswith("/"):
        return ""  # a bare name matches at any depth, like gitignore: no fixed folder
    return "/".join(parts)


def read_spec(
    path: Path | str, skipped: Counter[str] | None = None, *, dir_fd: int | None = None
) -> pathspec.GitIgnoreSpec | None:
    """An ignore file's rules; a missing one is None, one that is not a regular file (a FIFO
    named .gitignore) is skipped (and counted in `skipped`), never read. With `dir_fd`, `path`
    is relative to that folder and each folder on the way is opened by name without following
    a link (one that is not a plain folder: no rules from there)."""
    raw: bytes | None = None
    try:
        if dir_fd is not None:
            raw = read_beneath(dir_fd, str(path).split("/"), MAX_IGNORE_BYTES)
        elif os.path.lexists(path):
            raw = read_regular(path, MAX_IGNORE_BYTES)
    except Unreadable as exc:
        if skipped is not None:
            skipped[exc.reason] += 1
        return None
    if raw is None:
        return None
    lines = raw.decode("utf-8", "replace").splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines) if lines else None


def rule_verdict(rules: Rules, rel: str, is_dir: bool) -> bool | None:
    """Git's answer for one path: the deepest ignore file with a matching rule decides, and
    within a file the last matching rule (so `!keep.log` re-includes); None if none match."""
    for base, spec in reversed(rules):
        local = rel[len(base) + 1 :] if base else rel
        verdict = spec.check_file(local + "/" if is_dir else local).include
        if verdict is not None:
            return verdict
    return None


def names_file(rules: Rules, rel: str) -> bool:
    """Whether the deciding `.fathomignore` rule for the file `rel` is a negation that matches
    the file itself (a folder pattern such as `!config/` matches what lies inside through
    the folder: that does not count)."""
    for base, spec in reversed(rules):
        local = rel[len(base) + 1 :] if base else rel
        result = spec.check_file(local)
        if result.include is None:
            continue
        if result.include or result.index is None:
            return False
        matched = spec.patterns[result.index].match_file(local)
        return matched is not None and not matched.match.groupdict().get("ps_d")
    return False
