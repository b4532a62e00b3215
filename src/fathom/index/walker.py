"""Walker: decides which files of a project get indexed, and reads them as text.

Owns: `.gitignore` semantics (the root file, nested files, negation, `.git/info/exclude`,
via `pathspec`'s gitwildmatch rules), the directories no project wants indexed (VCS metadata,
virtualenvs, dependency and build output), and the per-file refusals: binaries, huge files,
minified, generated and lock files, data dumps. Text that is not UTF-8 is still read (with
replacement characters or as Latin-1) and reported. Every file left out is counted under
its reason, and every folder left out is named, so the CLI can say what it skipped and why.

The project's own word comes first: `.fathomignore` files (gitignore syntax, any folder)
exclude what they match and re-include (`!build/`) what the built-in skips or `.gitignore`
would leave out, and `include` globs (`fathom index --include GLOB`) bring back folders and
files the built-in skips or `.gitignore` leave out. `Selection` holds these decisions once,
for the walk and for the watcher, which asks `Selection.admits(path)` of every changed file.

It trusts nothing on disk. Only regular files are opened (ignore files included): FIFOs,
sockets and devices are skipped and counted, and the check is made on the opened descriptor
(`O_NONBLOCK | O_NOFOLLOW`, then `fstat`), so a file swapped for a FIFO between the listing
and the read cannot hang the walk. Nothing is opened by its path: every folder is opened by
name through its parent's descriptor and every file through its folder's (`walking.tree`), so
a folder swapped for a link between the listing and the read (`renameat2` exchanges them
atomically) is refused as a link, never followed out of the project. Every read is bounded in
size and in time. A walk stops between entries when its `cancel` event is set. A file whose
name is not valid UTF-8 is kept, under its name with the bad bytes escaped (`caf\\xe9.py`),
and reported. System folders (`/`, `/proc`, `/sys`, `/dev`, `/etc` by default) are refused as
a root, even through a link.

A walk comes in two steps, so an indexer can stream a project of any size: `survey` lists the
files it would read (names, sizes and the decisions by name, no file opened), and
`Survey.read` reads one of them; `walk` is both at once, for callers that want every file.
Folders are walked from an explicit stack, so no depth of nesting exhausts Python's recursion.

One rule for what may be read: `read_one` reads a single file by path with exactly a walk's
decisions (folders, ignore files, names, size, bytes) and raises `ReadRefused` naming the
reason otherwise. Anything that reads a project outside a walk (the agents' file tools) goes
through it. The caller's `extra_ignores` (the server's data dir inside a project) win over
every rule of the project, `.fathomignore` negations and `include` globs included.

Secrets stay out: a credential file by its name (`.env`, `id_rsa`, `*.pem`, `.aws/`...) is not
read (counted as `secret`, named by path in `WalkResult.secrets`); in any other file, key
material is redacted (`secrets.redact`, in the one step that reads and decodes a file, so every
reader that goes through the walker gets the redacted text: the index, `read_code`'s check
against the disk, the agents' `read_file` and `grep`). Each value becomes `[REDACTED:<rule>]`
on the lines it held, so the code beside a key stays searchable at its own line numbers; the
file is named by path in `WalkResult.redacted`, never quoted. Only a `.fathomignore` negation
that names the file itself (`!config/test.env`, not a folder's `!config/`, not `.gitignore`,
not an `include` glob) takes one back, whole and unredacted.

Refuses: to follow symbolic links (a link can leave the project or loop), to chunk, and to
guess at languages beyond `chunking.detect_language`.

This module holds the walk itself (the listing, the read of each listed file, `read_one`) and
exports every name of the walk; its parts live in `fathom.index.walking`: the skip reasons and
their words, the roots, what a name says, the selection rules and the bounded read.
"""

from __future__ import annotations

import os
import stat
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fathom.config import REFUSED_ROOTS
from fathom.index.chunking import detect_language
from fathom.index.secrets import find_secret, redact, secret_by_name
from fathom.index.walking.names import (
    ALWAYS_SKIP_DIRS,
    BINARY_SUFFIXES,
    DATA_SUFFIXES,
    GENERATED_MARKERS,
    GENERATED_NAMES,
    GENERATED_SUFFIXES,
    GENERATED_TAG,
    reason_by_name,
)
from fathom.index.walking.read import (
    MAX_FILE_BYTES,
    MAX_IGNORE_BYTES,
    READ_SECONDS,
    Unreadable,
    read_regular,
)
from fathom.index.walking.reasons import (
    BINARY,
    DATA,
    DECODED_WITH_REPLACEMENT,
    EMPTY,
    ESCAPED_NAME,
    EXCLUDED,
    FATHOMIGNORED,
    GENERATED,
    GITIGNORED,
    IGNORED_DIR,
    MINIFIED,
    MISSING,
    RULES_FILE,
    SECRET,
    SLOW,
    SPECIAL,
    SYMLINK,
    TOO_LARGE,
    UNREADABLE,
    ReadRefused,
    WalkCancelled,
)
from fathom.index.walking.roots import (
    RefusedRoot,
    check_root,
    resolve_roots,
    root_moved,
    under_roots,
)
from fathom.index.walking.selection import (
    FATHOMIGNORE,
    IGNORE_FILES,
    Rules,
    Scope,
    Selection,
    SelectionOptions,
)
from fathom.index.walking.tree import Tree, WalkUnsupported

# Every name the walker exported before its parts moved to `fathom.index.walking`.
__all__ = [
    "ALWAYS_SKIP_DIRS",
    "BINARY",
    "BINARY_SUFFIXES",
    "Candidate",
    "DATA",
    "DATA_SUFFIXES",
    "DECODED_WITH_REPLACEMENT",
    "EMPTY",
    "ESCAPED_NAME",
    "EXCLUDED",
    "FATHOMIGNORE",
    "FATHOMIGNORED",
    "GENERATED",
    "GENERATED_MARKERS",
    "GENERATED_NAMES",
    "GENERATED_SUFFIXES",
    "GENERATED_TAG",
    "GITIGNORED",
    "IGNORED_DIR",
    "IGNORE_FILES",
    "ListedFile",
    "MAX_FILE_BYTES",
    "MAX_IGNORE_BYTES",
    "MINIFIED",
    "MISSING",
    "READ_SECONDS",
    "REFUSED_ROOTS",
    "RULES_FILE",
    "ReadRefused",
    "RefusedRoot",
    "Rules",
    "SECRET",
    "SLOW",
    "SPECIAL",
    "SYMLINK",
    "Selection",
    "SelectionOptions",
    "SourceFile",
    "Survey",
    "TOO_LARGE",
    "Tree",
    "UNREADABLE",
    "Unreadable",
    "WalkCancelled",
    "WalkResult",
    "WalkUnsupported",
    "check_root",
    "decode",
    "find_secret",
    "read_one",
    "read_regular",
    "resolve_roots",
    "root_moved",
    "secret_by_name",
    "survey",
    "under_roots",
    "walk",
]


@dataclass(frozen=True)
class SourceFile:
    """One file to index."""

    path: str  # relative to the project root, POSIX separators
    text: str
    language: str  # from chunking.detect_language
    table: str  # "code" or "docs"
    size: int  # bytes on disk
    encoding: str  # "utf-8", "utf-8-sig", "utf-16", "utf-8+replace", "cp1252", "latin-1"

    @property
    def lossy(self) -> bool:
        """True when the bytes were not valid in the encoding the text claims to be."""
        return self.encoding in ("utf-8+replace", "cp1252", "latin-1")


@dataclass(frozen=True)
class ListedFile:
    """A file the listing admits by its path and name; whether it is indexed depends on its
    bytes (`Survey.read`)."""

    path: str  # on disk
    rel: str  # relative to the project root, POSIX separators, bad bytes escaped
    size: int  # bytes on disk when listed (0 if it could not be stat'ed; the read decides)
    escaped: bool = False  # its path had undecodable bytes, escaped in `rel`
    taken_back: bool = False  # a .fathomignore `!` line names it: read even if it holds a secret
    names: tuple[str, ...] = ()  # its raw names from the root down, as it is opened (see Tree)


# Its former name, kept for callers.
Candidate = ListedFile


@dataclass
class WalkResult:
    files: list[SourceFile] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    decoded_with_replacement: list[str] = field(default_factory=list)  # paths, also on .notes
    escaped_names: list[str] = field(default_factory=list)  # paths, also on .notes
    # Folders left out whole, by reason: {"ignored-dir": ["node_modules", "web/dist"], ...}.
    skipped_dirs: dict[str, list[str]] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)  # paths left out as `secret`, never content
    redacted: list[str] = field(default_factory=list)  # paths kept with key material redacted

    def secret(self, rel: str) -> None:
        """Count and name one file left out because it is a credential file."""
        self.skipped[SECRET] += 1
        self.secrets.append(rel)

    @property
    def notes(self) -> Counter[str]:
        """Kept-but-noteworthy counts (decoded-with-replacement, escaped-name)."""
        out: Counter[str] = Counter()
        if self.decoded_with_replacement:
            out[DECODED_WITH_REPLACEMENT] = len(self.decoded_with_replacement)
        if self.escaped_names:
            out[ESCAPED_NAME] = len(self.escaped_names)
        return out

    def __iter__(self) -> Iterator[SourceFile]:
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)


@dataclass
class Survey:
    """A project's listing: the files a walk would read, in path order, and the tallies so far
    (`result`: what was left out by name and folder now; what `read` refuses is added as each
    file is read). Holds paths and sizes only, never a file's text."""

    root: Path
    candidates: list[ListedFile]
    result: WalkResult
    max_file_bytes: int = MAX_FILE_BYTES
    tree: Tree | None = None  # the root as the listing opened it: files are read through it

    @property
    def bytes(self) -> int:
        """The bytes reading every listed file goes through (a file over the size limit is
        refused unread: it counts for the limit only)."""
        return sum(self.weight(c) for c in self.candidates)

    def weight(self, candidate: ListedFile) -> int:
        return min(candidate.size, self.max_file_bytes + 1)

    def read(self, candidate: ListedFile) -> SourceFile | None:
        """The file as text, or None when its bytes refuse it (the reason is counted)."""
        if self.tree is None:
            self.tree = Tree(self.root)
        return _consider_file(candidate, self.max_file_bytes, self.result, tree=self.tree)

    def close(self) -> None:
        """Close the descriptors the reads hold (a later read opens the same root again)."""
        if self.tree is not None:
            self.tree.close()

    def files(self, cancel: threading.Event | None = None) -> Iterator[SourceFile]:
        """Every indexable file, read one at a time; stops with `WalkCancelled` between two
        files once `cancel` is set."""
        try:
            for candidate in self.candidates:
                if cancel is not None and cancel.is_set():
                    raise WalkCancelled(self.root)
                source = self.read(candidate)
                if source is not None:
                    yield source
        finally:
            self.close()


def survey(
    root: Path,
    *,
    max_file_bytes: int = MAX_FILE_BYTES,
    extra_ignores: Iterable[str] = (),
    include: Iterable[str] = (),
    selection: Selection | None = None,
    cancel: threading.Event | None = None,
) -> Survey:
    """List the files under `root` a walk would read, sorted by path, with skipped folders
    counted and named; no file is opened (ignore files aside).

    `extra_ignores` are gitwildmatch patterns relative to `root` (as in a root .gitignore,
    but they win over everything: .gitignore and .fathomignore negations and `include` globs;
    the data dir inside a project is one). `include` globs (gitwildmatch) take back what the
    built-in skips and .gitignore leave out. When `cancel` is set the
    listing raises `WalkCancelled` before its next entry.
    """
    root = Path(root)
    result = WalkResult()
    selection = selection or Selection(root, include=include, extra_ignores=extra_ignores)
    tree = Tree(root)
    try:
        top = selection.top(result.skipped, dir_fd=tree.root_fd())
        candidates = list(_walk_dir(root, "", top, selection, result, cancel=cancel, tree=tree))
    except Unreadable as exc:  # the root itself: nothing listed, as for any unreadable folder
        result.skipped[exc.reason] += 1
        candidates = []
    except BaseException:
        tree.close()
        raise
    tree.release()  # the reads open the folders they need again, through the root
    candidates.sort(key=lambda c: c.rel)
    for folders in result.skipped_dirs.values():
        folders.sort()
    return Survey(root, candidates, result, max_file_bytes, tree)


def walk(root: Path, *, cancel: threading.Event | None = None, **options: Any) -> WalkResult:
    """Every indexable file under `root`, sorted by path, with skipped files counted and
    skipped folders named: `survey` (with its `options`), then every file read, all held at
    once (an index job streams them instead: `indexer.Discovery`). Stops with `WalkCancelled` once
    `cancel` is set.
    """
    listed = survey(root, cancel=cancel, **options)
    result = listed.result
    result.files.extend(listed.files(cancel))
    result.decoded_with_replacement.sort()
    result.escaped_names.sort()
    result.secrets.sort()
    result.redacted.sort()
    return result


def read_one(
    root: Path,
    rel: str,
    *,
    selection: Selection | None = None,
    max_file_bytes: int = MAX_FILE_BYTES,
    include: Iterable[str] = (),
    extra_ignores: Iterable[str] = (),
) -> SourceFile:
    """The one file at `rel` (relative to `root`, POSIX) exactly as a walk would read it, or
    `ReadRefused` naming why a walk would leave it out.

    The same decisions in the same order as a walk: every folder on the way through
    `Selection.directory` (with the ignore files of each folder in force), the file through
    `Selection.file` and the refusals by name, then the bytes through the walk's own read
    (`Survey.read`: bounded by `max_file_bytes`, decoded, judged). No link is followed on the
    way: every folder and the file are opened by name through the descriptor of the folder
    above (`walking.tree`), so a folder swapped for a link meanwhile is refused as a link.
    This is how anything outside a walk (the agents' file tools, `read_code`) reads a project
    file."""
    root = Path(root)
    selection = selection or Selection(root, include=include, extra_ignores=extra_ignores)
    parts = [p for p in rel.split("/") if p and p != "."]
    if not parts or ".." in parts:
        raise ReadRefused(rel or ".", MISSING)
    rel = "/".join(parts)
    with Tree(root) as tree:
        scope = _folders_of_one(tree, selection, parts, rel)
        name = parts[-1]
        info = tree.stat(parts)
        if info is None:
            raise ReadRefused(rel, MISSING)
        if stat.S_ISLNK(info.st_mode):
            raise ReadRefused(rel, SYMLINK)
        if not stat.S_ISREG(info.st_mode):
            raise ReadRefused(rel, SPECIAL)
        if name in IGNORE_FILES:
            raise ReadRefused(rel, RULES_FILE)
        reason, forced = selection.file(name, rel, scope)
        taken_back = selection.taken_back(rel, scope)
        if reason is None and not taken_back and secret_by_name(rel):
            reason = SECRET
        if reason is None and not forced:
            reason = reason_by_name(name.lower())
        if reason is not None:
            raise ReadRefused(rel, reason)
        candidate = ListedFile(
            str(root.joinpath(*parts)), rel, info.st_size, taken_back=taken_back, names=tuple(parts)
        )
        listed = Survey(root, [candidate], WalkResult(), max_file_bytes, tree)
        source = listed.read(candidate)
    if source is None:
        raise ReadRefused(rel, next(iter(listed.result.skipped), UNREADABLE))
    return source


def _folders_of_one(tree: Tree, selection: Selection, parts: list[str], rel: str) -> Scope:
    """The rules in force in the folder of the file at `parts`, each folder on the way judged
    as a walk judges it and opened through the one above; `ReadRefused` at the first a walk
    would not enter (a link, a missing or skipped folder)."""
    try:
        at = tree.root_fd()
    except Unreadable as exc:
        raise ReadRefused(rel, exc.reason) from None
    scope = selection.scope(tree.root, "", selection.top(dir_fd=at), False, dir_fd=at)
    for i, name in enumerate(parts[:-1]):
        names = parts[: i + 1]
        info = tree.stat(names)
        if info is None or stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            raise ReadRefused(rel, MISSING if info is None or not stat.S_ISLNK(info.st_mode) else SYMLINK)
        here, sub = tree.root.joinpath(*names), "/".join(names)
        reason, restricted = selection.directory(name, sub, str(here), scope)
        if reason is not None:
            raise ReadRefused(rel, reason)
        try:
            at = tree.folder(names)
        except Unreadable as exc:  # it became a link (or went) since it was looked at
            raise ReadRefused(rel, exc.reason) from None
        scope = selection.scope(here, sub, scope, restricted, dir_fd=at)
    return scope


def _display(name: str) -> str:
    """A file name as stored and shown: names that are not valid UTF-8 reach Python with their
    bad bytes as lone surrogates, which no database column (UTF-8) accepts; they become
    backslash escapes (`caf\\xe9.py`) instead of aborting the whole project."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")


@dataclass(frozen=True)
class _Folder:
    """A folder waiting on the walk's stack, with what its parent decided about it."""

    path: Path
    rel: str
    parent: Scope
    restricted: bool = False
    escaped: bool = False
    names: tuple[str, ...] = ()  # raw names from the root down, as the tree opens it


def _walk_dir(
    directory: Path,
    rel: str,
    parent: Scope,
    selection: Selection,
    result: WalkResult,
    restricted: bool = False,
    *,
    cancel: threading.Event | None = None,
    escaped: bool = False,
    tree: Tree,
) -> Iterator[ListedFile]:
    # An explicit stack, not recursion: a tree a thousand folders deep (generated fixtures,
    # a runaway script) is walked like any other instead of failing the whole project on
    # Python's recursion limit. Children are pushed in reverse so folders come off in name
    # order (the survey sorts the files anyway).
    stack = [_Folder(directory, rel, parent, restricted, escaped)]
    while stack:
        folder = stack.pop()
        children = list(_list_folder(folder, selection, result, cancel, tree))
        for child in children:
            if isinstance(child, ListedFile):
                yield child
        stack.extend(reversed([c for c in children if isinstance(c, _Folder)]))


def _list_folder(
    folder: _Folder, selection: Selection, result: WalkResult, cancel: threading.Event | None, tree: Tree
) -> Iterator[ListedFile | _Folder]:
    """One folder's entries: the files a walk would read and the folders it enters. The folder
    is opened through its parent's descriptor: one swapped for a link since its parent was
    listed is counted as a link, and nothing under it is listed."""
    directory, rel = folder.path, folder.rel
    prefix = str(directory)  # paths joined as strings: a Path per entry costs a walk ~10%
    try:
        at = tree.folder(folder.names)
        scope = selection.scope(directory, rel, folder.parent, folder.restricted, result.skipped, dir_fd=at)
        entries = sorted(os.scandir(at), key=lambda e: e.name)
    except Unreadable as exc:
        result.skipped[exc.reason] += 1
        return
    except OSError:
        result.skipped[UNREADABLE] += 1
        return
    for entry in entries:
        if cancel is not None and cancel.is_set():
            raise WalkCancelled(Path(directory))
        name = _display(entry.name)
        child_rel = f"{rel}/{name}" if rel else name
        child_escaped = folder.escaped or name != entry.name
        try:
            if entry.is_symlink():
                result.skipped[SYMLINK] += 1
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            is_file = entry.is_file(follow_symlinks=False)
        except OSError:
            result.skipped[UNREADABLE] += 1
            continue
        if is_dir:
            # A skipped directory is counted once, and named: walking node_modules to count
            # it costs more than indexing the project.
            path = f"{prefix}/{entry.name}"  # scandir of a descriptor names no folder
            reason, inner = selection.directory(entry.name, child_rel, path, scope)
            if reason is None:
                yield _Folder(Path(path), child_rel, scope, inner, child_escaped, (*folder.names, entry.name))
            elif not scope.restricted:  # inside a skipped folder nothing more is named
                result.skipped[reason] += 1
                result.skipped_dirs.setdefault(reason, []).append(child_rel)
            continue
        if entry.name in IGNORE_FILES:
            continue  # read as rules above (or counted there); not content
        if not is_file:
            if not scope.restricted:
                result.skipped[SPECIAL] += 1  # sockets, fifos, devices
            continue
        listed = _listed_file(entry, child_rel, scope, selection, result)
        if listed is not None:
            size, taken_back = listed
            path = f"{prefix}/{entry.name}"
            yield ListedFile(path, child_rel, size, child_escaped, taken_back, (*folder.names, entry.name))


def _listed_file(
    entry: os.DirEntry[str], rel: str, scope: Scope, selection: Selection, result: WalkResult
) -> tuple[int, bool] | None:
    """A regular file's size, and whether a rule took it back, when the walk reads it; None (the
    file counted or named) when a rule skips it."""
    reason, forced = selection.file(entry.name, rel, scope)
    if reason is not None:
        if not scope.restricted:
            result.skipped[reason] += 1
        return None
    # Include globs and folder negations do not take a credential back: only its own
    # `!path` line in .fathomignore does.
    taken_back = selection.taken_back(rel, scope)
    if not taken_back and secret_by_name(rel):
        result.secret(rel)
        return None
    reason = None if forced else reason_by_name(entry.name.lower())
    if reason is not None:
        result.skipped[reason] += 1
        return None
    try:
        return entry.stat(follow_symlinks=False).st_size, taken_back
    except OSError:
        return 0, taken_back  # the read will say why


def _consider_file(
    candidate: ListedFile, max_file_bytes: int, result: WalkResult, *, tree: Tree
) -> SourceFile | None:
    rel = candidate.rel
    try:
        raw = _read_listed(candidate, max_file_bytes, tree)
    except Unreadable as exc:
        result.skipped[exc.reason] += 1
        return None
    size = len(raw)
    if size == 0:
        result.skipped[EMPTY] += 1
        return None
    decoded = decode(raw)
    if decoded is None:
        result.skipped[BINARY] += 1
        return None
    text, encoding = decoded
    if not text.strip():
        result.skipped[EMPTY] += 1
        return None
    head = text[:1000].lower()
    if GENERATED_TAG in head or any(a in head and b in head for a, b in GENERATED_MARKERS):
        result.skipped[GENERATED] += 1
        return None
    if _minified(text):
        result.skipped[MINIFIED] += 1
        return None
    if not candidate.taken_back:
        # The values go, the code stays: every line where it was, so a chunk, a symbol, a
        # search hit and `read_code` agree on line numbers with the file. Named, never quoted.
        redacted = redact(text, rel)
        if redacted.rules:
            text = redacted.text
            result.redacted.append(rel)
    language, table = detect_language(rel)
    source = SourceFile(path=rel, text=text, language=language, table=table, size=size, encoding=encoding)
    if source.lossy:
        result.decoded_with_replacement.append(rel)
    if candidate.escaped:
        result.escaped_names.append(rel)
    return source


def _read_listed(candidate: ListedFile, max_file_bytes: int, tree: Tree) -> bytes:
    """A listed file's bytes, opened by name in its folder, that folder opened through the
    tree's root descriptor: a folder on the way that is a link now refuses the read
    (`SYMLINK`) instead of leading out of the project. What the listing saw of the file
    itself (its inode) is not held against it: reached this way it lies in its folder under
    the root, and a file saved over (a new inode, an editor's atomic save) between the
    listing and the read is read as it is now."""
    names = candidate.names or Path(candidate.path).relative_to(tree.root).parts
    return read_regular(names[-1], max_file_bytes, dir_fd=tree.folder(names[:-1]))


def _minified(text: str) -> bool:
    """Bundled or minified output: long, with lines no person wrote."""
    if len(text) < 4000:
        return False
    lines = text.count("\n") + 1
    longest = max(len(line) for line in text.split("\n"))
    return longest > 2000 and len(text) / lines > 300


_SNIFF = 8192
# C0 control characters other than tab, newline, vertical tab, form feed, carriage return
# and escape: text almost never has them, binaries nearly always do.
_CONTROL = frozenset(range(0, 32)) - {9, 10, 11, 12, 13, 27}


def decode(raw: bytes) -> tuple[str, str] | None:
    """(text, encoding) for bytes that are text, None for a binary.

    UTF-8 (with or without BOM) and BOM-marked UTF-16 are read exactly. Other bytes are
    text if control characters are rare: mostly-UTF-8 with a few bad bytes keeps its UTF-8
    (bad bytes become U+FFFD), anything else is read as Windows-1252 or Latin-1.
    """
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return raw.decode("utf-16"), "utf-16"
        except UnicodeDecodeError:
            return None
    head = raw[:_SNIFF]
    # Control bytes mean the same in UTF-8 and every legacy code page: a file dense with
    # them is binary however it happens to decode.
    if b"\x00" in head or sum(byte in _CONTROL for byte in head) > len(head) * 0.02:
        return None
    if raw.startswith(b"\xef\xbb\xbf"):
        try:
            return raw[3:].decode("utf-8"), "utf-8-sig"
        except UnicodeDecodeError:
            pass
    else:
        try:
            return raw.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            pass
    text = raw.decode("utf-8", "replace")
    bad = text.count("\ufffd")
    multibyte = sum(1 for ch in text if "\u0080" <= ch and ch != "\ufffd")
    if multibyte > bad:
        # Valid multi-byte sequences outnumber the broken ones: this is UTF-8 with damage,
        # and reading it as Latin-1 would garble every correct character.
        return text, "utf-8+replace"
    try:
        return raw.decode("cp1252"), "cp1252"
    except UnicodeDecodeError:
        return raw.decode("latin-1"), "latin-1"
