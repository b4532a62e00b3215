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
and the read cannot hang the walk. Every read is bounded in size and in time. A walk stops
between entries when its `cancel` event is set. A file whose name is not valid UTF-8 is kept,
under its name with the bad bytes escaped (`caf\\xe9.py`), and reported. System folders
(`/`, `/proc`, `/sys`, `/dev`, `/etc` by default) are refused as a root, even through a link.

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
read, and a file whose text holds key material (`secrets.find_secret`, asked in the one step
that reads and decodes a file, so every reader that goes through the walker gets it) is left
out whole; both are counted as `secret` and named by path in `WalkResult.secrets`, never by
content. Only a `.fathomignore` negation that names the file itself (`!config/test.env`, not
a folder's `!config/`, not `.gitignore`, not an `include` glob) takes one back.

Refuses: to follow symbolic links (a link can leave the project or loop), to chunk, and to
guess at languages beyond `chunking.detect_language`.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pathspec

from fathom.config import REFUSED_ROOTS
from fathom.errors import ConfigError, FathomError
from fathom.index.chunking import detect_language
from fathom.index.secrets import find_secret, secret_by_name

MAX_FILE_BYTES = 1_000_000
MAX_IGNORE_BYTES = 1_000_000  # a .gitignore larger than this is not a .gitignore
READ_SECONDS = 10.0  # one file's read; a slower one (a dying disk, a stalled mount) is skipped

# Directories never worth indexing: VCS metadata, dependencies, virtualenvs, build output
# and tool caches. Vendored code is someone else's project; it drowns the project's own hits.
ALWAYS_SKIP_DIRS = frozenset({
    ".git", ".hg", ".svn", ".bzr", "_darcs", ".jj",
    "node_modules", "bower_components", "jspm_packages", "vendor", "third_party", "thirdparty",
    ".venv", "venv", "virtualenv", "site-packages", "dist-packages", "__pypackages__",
    "__pycache__", ".eggs", ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache",
    ".pytype", ".hypothesis", ".ipynb_checkpoints", ".cache",
    "dist", "build", "target", "_build", ".gradle", ".next", ".nuxt", ".svelte-kit",
    ".parcel-cache", ".turbo", ".terraform", ".serverless", "coverage", "htmlcov",
    ".idea", ".vs",
})
# Files that are machine-written: lock files, generated bindings, source maps.
GENERATED_NAMES = frozenset({
    "package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml", "bun.lockb",
    "poetry.lock", "pdm.lock", "uv.lock", "pipfile.lock", "cargo.lock", "gemfile.lock",
    "composer.lock", "go.sum", "flake.lock", "mix.lock", "podfile.lock", "packages.lock.json",
    "pubspec.lock", "shrinkwrap.yaml",
})
GENERATED_SUFFIXES = (
    ".min.js", ".min.css", ".min.mjs", ".bundle.js", ".chunk.js", ".map", ".pb.go",
    "_pb2.py", "_pb2.pyi", "_pb2_grpc.py", ".pb.h", ".pb.cc", ".g.dart", ".designer.cs",
    ".generated.ts", ".generated.js", ".generated.cs", ".lock",
)
# Formats that are text but data, not code or prose: their chunks would be noise.
DATA_SUFFIXES = frozenset({
    ".csv", ".tsv", ".jsonl", ".ndjson", ".log", ".svg", ".sqlite", ".db", ".dump", ".sql.gz",
    ".patch", ".diff", ".pem", ".crt", ".key", ".p12", ".pfx",
})
# Binary by extension: no need to open them.
BINARY_SUFFIXES = frozenset({
    ".png", ".jpg", ".jpeg", ".gif", ".bmp", ".ico", ".icns", ".webp", ".tif", ".tiff", ".psd",
    ".pdf", ".zip", ".gz", ".tgz", ".bz2", ".xz", ".zst", ".7z", ".rar", ".tar", ".jar", ".war",
    ".whl", ".egg", ".so", ".dylib", ".dll", ".exe", ".o", ".a", ".lib", ".obj", ".class",
    ".pyc", ".pyo", ".pyd", ".wasm", ".woff", ".woff2", ".ttf", ".otf", ".eot", ".mp3", ".mp4",
    ".wav", ".flac", ".ogg", ".avi", ".mov", ".mkv", ".webm", ".npy", ".npz", ".pkl",
    ".pickle", ".pt", ".pth", ".onnx", ".safetensors", ".bin", ".parquet", ".arrow", ".feather",
    ".lance", ".h5", ".hdf5", ".doc", ".docx", ".xls", ".xlsx", ".ppt", ".pptx", ".iso",
    ".dmg", ".deb", ".rpm",
})
# Markers a code generator leaves at the top of its output ("// Code generated by protoc.
# DO NOT EDIT.", "@generated"). Both halves are required for the prose form: a person may
# well write "do not edit" alone.
GENERATED_TAG = "@generated"
GENERATED_MARKERS = (("generated", "do not edit"), ("generated", "do not modify"))

# Skip reasons, as counted in WalkResult.skipped.
IGNORED_DIR = "ignored-dir"  # a directory from ALWAYS_SKIP_DIRS or a virtualenv: counted once
GITIGNORED = "gitignored"  # a file or a whole directory (counted once) matched by .gitignore
EXCLUDED = "excluded"  # matched by the caller's extra_ignores
FATHOMIGNORED = "fathomignored"  # a file or a whole directory matched by .fathomignore
BINARY = "binary"
TOO_LARGE = "too-large"
GENERATED = "generated"
MINIFIED = "minified"
DATA = "data"
EMPTY = "empty"
SYMLINK = "symlink"
SPECIAL = "special-file"  # FIFOs, sockets, devices: never opened for reading
UNREADABLE = "unreadable"
SLOW = "slow-read"  # a read that did not finish within READ_SECONDS
SECRET = "secret"  # a credential file by name, or a file holding key material (named by path)
# Not a skip: files read with replacement characters or as Latin-1 (kept, but reported).
DECODED_WITH_REPLACEMENT = "decoded-with-replacement"
# Not a skip: files kept under a name whose undecodable bytes were escaped (reported).
ESCAPED_NAME = "escaped-name"


class WalkCancelled(FathomError):
    """The walk was cancelled between two entries (its job was cancelled)."""

    def __init__(self, root: Path):
        self.root = root
        super().__init__(f"the walk of {root} was cancelled")


class RefusedRoot(ConfigError):
    def __init__(self, path: str, refused: str):
        self.path, self.refused = path, refused
        via = "" if os.path.realpath(path) == path else f" (it leads to {os.path.realpath(path)})"
        super().__init__(
            f"refusing to index {path}{via}: {refused} is a system folder, not a project. "
            f"Give the path of a project folder (the refused folders are set by "
            f"FATHOM_REFUSED_ROOTS)."
        )


def check_root(root: Path | str, refused: Iterable[str] = REFUSED_ROOTS) -> Path:
    """`root` resolved (links followed), or `RefusedRoot` when it is a system folder or lies
    inside one. `/` refuses only itself: every path lies under it."""
    given = str(root)
    real = Path(os.path.realpath(os.path.expanduser(given)))
    for folder in refused:
        base = Path(os.path.realpath(folder))
        if real == base or (base != Path(base.anchor) and base in real.parents):
            raise RefusedRoot(given, str(folder))
    return real


def resolve_roots(raw: Iterable[str | Path]) -> list[Path]:
    """The allowed index roots (FATHOM_INDEX_ROOTS), as real paths: a link out of a root is
    out."""
    return [Path(os.path.realpath(Path(r).expanduser())) for r in raw if str(r).strip()]


def under_roots(real: Path, roots: Iterable[Path]) -> bool:
    """Whether the real path `real` is one of `roots` (real paths) or lies inside one: the one
    test of "inside the index roots", for `index_project` and for every live sync."""
    return any(real == r or real.is_relative_to(r) for r in roots)


def root_moved(registered: Path | str, roots: Iterable[Path] = ()) -> str | None:
    """Why the folder a project was indexed from can no longer be read as that project, or
    None. `registered` is the real path it was indexed from (its record's root). A folder that
    now resolves elsewhere (replaced by a link, or a link on the way) is refused: following
    it would index another folder under the project's name, possibly one outside `roots`
    (the real index roots) that no token may index."""
    registered = Path(registered)
    try:
        real = Path(os.path.realpath(registered))
    except (OSError, RuntimeError, ValueError):
        return f"the project folder {registered} cannot be resolved"
    if real == registered:
        return None
    roots = list(roots)
    if under_roots(registered, roots) and not under_roots(real, roots):
        return (f"the project folder now resolves outside the index roots: {registered} leads to "
                f"{real}, and the roots are {', '.join(map(str, roots))}")
    return f"the project folder now resolves to another folder: {registered} leads to {real}"


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
class Candidate:
    """A file the listing admits by its path and name; whether it is indexed depends on its
    bytes (`Survey.read`)."""

    path: str  # on disk
    rel: str  # relative to the project root, POSIX separators, bad bytes escaped
    size: int  # bytes on disk when listed (0 if it could not be stat'ed; the read decides)
    escaped: bool = False  # its path had undecodable bytes, escaped in `rel`
    taken_back: bool = False  # a .fathomignore `!` line names it: read even if it holds a secret


@dataclass
class WalkResult:
    files: list[SourceFile] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    decoded_with_replacement: list[str] = field(default_factory=list)  # paths, also on .notes
    escaped_names: list[str] = field(default_factory=list)  # paths, also on .notes
    # Folders left out whole, by reason: {"ignored-dir": ["node_modules", "web/dist"], ...}.
    skipped_dirs: dict[str, list[str]] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)  # paths left out as `secret`, never content

    def secret(self, rel: str) -> None:
        """Count and name one file left out because it is, or holds, a credential."""
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


Rules = list[tuple[str, pathspec.GitIgnoreSpec]]
FATHOMIGNORE = ".fathomignore"
IGNORE_FILES = frozenset({".gitignore", FATHOMIGNORE})


@dataclass(frozen=True)
class _Scope:
    """The rules in force in one directory: .gitignore and .fathomignore files from the root
    down, and whether only explicitly included paths are taken here (inside a skipped
    directory that an include glob reaches into)."""

    git: Rules
    fathom: Rules
    restricted: bool = False


class Selection:
    """Which paths of a project a walk takes: the built-in skips, `.gitignore`,
    `.fathomignore`, the `include` globs and the caller's `extra_ignores`. Decisions are by
    path and name only; the walker adds the refusals that need the file's bytes."""

    def __init__(self, root: Path, *, include: Iterable[str] = (),
                 extra_ignores: Iterable[str] = ()):
        self.root = Path(root)
        self.include = [g.strip().replace("\\", "/") for g in include if g and g.strip()]
        self._include = pathspec.GitIgnoreSpec.from_lines(self.include)
        # The literal folders an include glob names before its first wildcard: a skipped
        # folder on the way to one of them is entered, taking only what the glob includes.
        self._prefixes = [_literal_prefix(g) for g in self.include]
        self.extra = pathspec.GitIgnoreSpec.from_lines(list(extra_ignores))
        self._scopes: dict[str, _Scope] = {}

    def forget(self) -> None:
        """Drop the cached ignore files (one changed)."""
        self._scopes.clear()

    def top(self, skipped: Counter[str] | None = None) -> _Scope:
        base = _read_spec(self.root / ".git" / "info" / "exclude", skipped)
        return _Scope([("", base)] if base is not None else [], [])

    def scope(self, directory: Path, rel: str, parent: _Scope,
              restricted: bool | None = None, skipped: Counter[str] | None = None) -> _Scope:
        git, fathom = parent.git, parent.fathom
        spec = _read_spec(directory / ".gitignore", skipped)
        if spec is not None:
            git = [*git, (rel, spec)]
        spec = _read_spec(directory / FATHOMIGNORE, skipped)
        if spec is not None:
            fathom = [*fathom, (rel, spec)]
        return _Scope(git, fathom, parent.restricted if restricted is None else restricted)

    def included(self, rel: str, is_dir: bool) -> bool:
        return bool(self.include) and self._include.match_file(rel + "/" if is_dir else rel)

    def _reaches_into(self, rel: str) -> bool:
        return any(p == rel or p.startswith(rel + "/") for p in self._prefixes if p)

    def directory(self, name: str, rel: str, path: str, scope: _Scope) -> tuple[str | None, bool]:
        """(skip reason or None, restricted) for a directory: None enters it."""
        if self.extra.match_file(rel + "/"):
            return EXCLUDED, False  # the caller's exclusions (the data dir) are not negotiable
        verdict = _verdict(scope.fathom, rel, is_dir=True)
        if verdict is True:
            return FATHOMIGNORED, False
        if verdict is False or self.included(rel, True):
            return None, False  # the project's word wins over every skip below
        if name in ALWAYS_SKIP_DIRS or name.endswith(".egg-info") or _is_virtualenv(path):
            reason = IGNORED_DIR
        elif _verdict(scope.git, rel, is_dir=True):
            reason = GITIGNORED
        elif scope.restricted and not self._reaches_into(rel):
            return IGNORED_DIR, True  # inside a skipped folder, outside every include
        else:
            return None, scope.restricted
        if self._reaches_into(rel):
            return None, True
        return reason, False

    def file(self, name: str, rel: str, scope: _Scope) -> tuple[str | None, bool]:
        """(skip reason or None, forced): forced when the project included it explicitly,
        which overrides the refusals by name (lock, generated and data file names)."""
        if self.extra.match_file(rel):
            return EXCLUDED, False
        verdict = _verdict(scope.fathom, rel, is_dir=False)
        if verdict is True:
            return FATHOMIGNORED, False
        if verdict is False or self.included(rel, False):
            return None, True
        if scope.restricted:
            return IGNORED_DIR, False
        if _verdict(scope.git, rel, is_dir=False):
            return GITIGNORED, False
        return None, False

    def taken_back(self, rel: str, scope: _Scope | None = None) -> bool:
        """Whether a `.fathomignore` negation names the file at `rel` itself, which takes it
        back from the secret rules. A folder's negation (`!config/`) does not: a credential is
        read only where the project names it."""
        if scope is None:  # a single path (not from a walk): its folders' ignore files
            scope = self._cached_scope("", Path(self.root), None)
            folders = rel.split("/")[:-1]
            for i in range(len(folders)):
                sub = "/".join(folders[: i + 1])
                scope = self._cached_scope(sub, self.root / sub, scope)
        return _names_file(scope.fathom, rel)

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
        return reason is None and (forced or _reason_by_name(parts[-1].lower()) is None)

    def _cached_scope(self, rel: str, directory: Path, parent: _Scope | None,
                      restricted: bool | None = None) -> _Scope:
        key = f"{rel}|{restricted}"
        scope = self._scopes.get(key)
        if scope is None:
            scope = self.scope(directory, rel, parent or self.top(), restricted)
            self._scopes[key] = scope
        return scope


def _literal_prefix(glob: str) -> str:
    """The folders a glob names before its first wildcard: `vendor/lib/**` -> `vendor/lib`."""
    parts = []
    for part in glob.strip("/").split("/"):
        if any(c in part for c in "*?[!"):
            break
        parts.append(part)
    if parts and "/" not in glob.strip("/") and not glob.endswith("/"):
        return ""  # a bare name matches at any depth, like gitignore: no fixed folder
    return "/".join(parts)


@dataclass
class Survey:
    """A project's listing: the files a walk would read, in path order, and the tallies so far
    (`result`: what was left out by name and folder now; what `read` refuses is added as each
    file is read). Holds paths and sizes only, never a file's text."""

    root: Path
    candidates: list[Candidate]
    result: WalkResult
    max_file_bytes: int = MAX_FILE_BYTES

    @property
    def bytes(self) -> int:
        """The bytes reading every listed file goes through (a file over the size limit is
        refused unread: it counts for the limit only)."""
        return sum(self.weight(c) for c in self.candidates)

    def weight(self, candidate: Candidate) -> int:
        return min(candidate.size, self.max_file_bytes + 1)

    def read(self, candidate: Candidate) -> SourceFile | None:
        """The file as text, or None when its bytes refuse it (the reason is counted)."""
        return _consider_file(candidate, self.max_file_bytes, self.result)

    def files(self, cancel: threading.Event | None = None) -> Iterator[SourceFile]:
        """Every indexable file, read one at a time; stops with `WalkCancelled` between two
        files once `cancel` is set."""
        for candidate in self.candidates:
            if cancel is not None and cancel.is_set():
                raise WalkCancelled(self.root)
            source = self.read(candidate)
            if source is not None:
                yield source


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
    candidates = list(_walk_dir(root, "", selection.top(result.skipped), selection, result,
                                cancel=cancel))
    candidates.sort(key=lambda c: c.rel)
    for folders in result.skipped_dirs.values():
        folders.sort()
    return Survey(root, candidates, result, max_file_bytes)


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
    return result


# What each refusal of `read_one` means, in words a person (or a model) can act on.
_WHY = {
    IGNORED_DIR: "it lies in a folder the index always leaves out (dependencies, build "
                 "output, VCS metadata)",
    GITIGNORED: "it is ignored by .gitignore",
    FATHOMIGNORED: "it is excluded by .fathomignore",
    EXCLUDED: "it lies in a folder the server keeps to itself",
    BINARY: "it is a binary file",
    TOO_LARGE: "it is larger than the index reads",
    GENERATED: "it is machine-written (a lock file or generated code)",
    MINIFIED: "it is minified or bundled output",
    DATA: "it is a data or key file, not code or prose",
    EMPTY: "it is empty",
    SYMLINK: "it is reached through a symbolic link",
    SPECIAL: "it is not a regular file",
    UNREADABLE: "it cannot be read",
    SLOW: "reading it took too long",
    SECRET: "it is a credential file or holds key material",
}
RULES_FILE = "ignore-file"  # a .gitignore or .fathomignore: rules for the walk, not content
MISSING = "missing"


class ReadRefused(FathomError):
    """`read_one` will not read this file: a walk would not index it. `reason` is the skip
    reason a walk would count it under (`gitignored`, `data`, `too-large`, ...)."""

    def __init__(self, rel: str, reason: str):
        self.rel, self.reason = rel, reason
        why = _WHY.get(reason) or {RULES_FILE: "it is an ignore file (rules, not content)",
                                   MISSING: "there is no such file"}.get(reason, reason)
        super().__init__(
            f"{rel} is not readable here: {why} ({reason}). Only files the index would take "
            f"are read; search the index, or read another file (the project's .fathomignore "
            f"decides what is taken)")


def read_one(root: Path, rel: str, *, selection: Selection | None = None,
             max_file_bytes: int = MAX_FILE_BYTES, include: Iterable[str] = (),
             extra_ignores: Iterable[str] = ()) -> SourceFile:
    """The one file at `rel` (relative to `root`, POSIX) exactly as a walk would read it, or
    `ReadRefused` naming why a walk would leave it out.

    The same decisions in the same order as a walk: every folder on the way through
    `Selection.directory` (with the ignore files of each folder in force), the file through
    `Selection.file` and the refusals by name, then the bytes through the walk's own read
    (`Survey.read`: bounded by `max_file_bytes`, decoded, judged). No link is followed on the
    way. This is how anything outside a walk (the agents' file tools) reads a project file."""
    root = Path(root)
    selection = selection or Selection(root, include=include, extra_ignores=extra_ignores)
    parts = [p for p in rel.split("/") if p and p != "."]
    if not parts or ".." in parts:
        raise ReadRefused(rel or ".", MISSING)
    rel = "/".join(parts)
    scope = selection.scope(root, "", selection.top(), False)
    here = root
    for i, name in enumerate(parts[:-1]):
        here = here / name
        sub = "/".join(parts[: i + 1])
        info = _lstat(here)
        if info is None or stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            raise ReadRefused(rel, MISSING if info is None or not stat.S_ISLNK(info.st_mode)
                              else SYMLINK)
        reason, restricted = selection.directory(name, sub, str(here), scope)
        if reason is not None:
            raise ReadRefused(rel, reason)
        scope = selection.scope(here, sub, scope, restricted)
    name, path = parts[-1], here / parts[-1]
    info = _lstat(path)
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
        reason = _reason_by_name(name.lower())
    if reason is not None:
        raise ReadRefused(rel, reason)
    candidate = Candidate(str(path), rel, info.st_size, taken_back=taken_back)
    listed = Survey(root, [candidate], WalkResult(), max_file_bytes)
    source = listed.read(candidate)
    if source is None:
        raise ReadRefused(rel, next(iter(listed.result.skipped), UNREADABLE))
    return source


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _read_spec(path: Path, skipped: Counter[str] | None = None) -> pathspec.GitIgnoreSpec | None:
    """An ignore file's rules; a missing one is None, one that is not a regular file (a FIFO
    named .gitignore) is skipped (and counted in `skipped`), never read."""
    if not os.path.lexists(path):
        return None
    try:
        raw = read_regular(path, MAX_IGNORE_BYTES)
    except _Unreadable as exc:
        if skipped is not None:
            skipped[exc.reason] += 1
        return None
    lines = raw.decode("utf-8", "replace").splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines) if lines else None


class _Unreadable(Exception):
    """One file could not be read; `reason` is the skip reason it is counted under."""

    def __init__(self, reason: str):
        self.reason = reason


def read_regular(path: str | os.PathLike[str], max_bytes: int, *, seconds: float = READ_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> bytes:
    """The bytes of a regular file, read without trusting what the listing said about it.

    Opened non-blocking and without following a link, then checked on the descriptor: a FIFO,
    a socket or a device is refused (`SPECIAL`) before a single read could hang. More than
    `max_bytes` is `TOO_LARGE`; a read slower than `seconds` is `SLOW`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise _Unreadable(SYMLINK if exc.errno == 40 else UNREADABLE) from None  # 40: ELOOP
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _Unreadable(SPECIAL)
        if info.st_size > max_bytes:
            raise _Unreadable(TOO_LARGE)
        deadline = clock() + seconds
        parts: list[bytes] = []
        got = 0
        while True:
            part = os.read(fd, min(1 << 20, max_bytes + 1 - got))
            if not part:
                break
            parts.append(part)
            got += len(part)
            if got > max_bytes:
                raise _Unreadable(TOO_LARGE)  # it grew while we read
            if clock() > deadline:
                raise _Unreadable(SLOW)
        return b"".join(parts)
    except OSError:
        raise _Unreadable(UNREADABLE) from None
    finally:
        os.close(fd)


def _display(name: str) -> str:
    """A file name as stored and shown: names that are not valid UTF-8 reach Python with their
    bad bytes as lone surrogates, which no database column (UTF-8) accepts; they become
    backslash escapes (`caf\\xe9.py`) instead of aborting the whole project."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")


def _verdict(rules: Rules, rel: str, is_dir: bool) -> bool | None:
    """Git's answer for one path: the deepest ignore file with a matching rule decides, and
    within a file the last matching rule (so `!keep.log` re-includes); None if none match."""
    for base, spec in reversed(rules):
        local = rel[len(base) + 1 :] if base else rel
        verdict = spec.check_file(local + "/" if is_dir else local).include
        if verdict is not None:
            return verdict
    return None


def _names_file(rules: Rules, rel: str) -> bool:
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


@dataclass(frozen=True)
class _Folder:
    """A folder waiting on the walk's stack, with what its parent decided about it."""

    path: Path
    rel: str
    parent: _Scope
    restricted: bool = False
    escaped: bool = False


def _walk_dir(
    directory: Path,
    rel: str,
    parent: _Scope,
    selection: Selection,
    result: WalkResult,
    restricted: bool = False,
    *,
    cancel: threading.Event | None = None,
    escaped: bool = False,
) -> Iterator[Candidate]:
    # An explicit stack, not recursion: a tree a thousand folders deep (generated fixtures,
    # a runaway script) is walked like any other instead of failing the whole project on
    # Python's recursion limit. Children are pushed in reverse so folders come off in name
    # order (the survey sorts the files anyway).
    stack = [_Folder(directory, rel, parent, restricted, escaped)]
    while stack:
        folder = stack.pop()
        children = list(_list_folder(folder, selection, result, cancel))
        for child in children:
            if isinstance(child, Candidate):
                yield child
        stack.extend(reversed([c for c in children if isinstance(c, _Folder)]))


def _list_folder(folder: _Folder, selection: Selection, result: WalkResult,
                 cancel: threading.Event | None) -> Iterator[Candidate | _Folder]:
    """One folder's entries: the files a walk would read and the folders it enters."""
    directory, rel = folder.path, folder.rel
    scope = selection.scope(directory, rel, folder.parent, folder.restricted, result.skipped)
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
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
            reason, inner = selection.directory(entry.name, child_rel, entry.path, scope)
            if reason is None:
                yield _Folder(Path(entry.path), child_rel, scope, inner, child_escaped)
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
        reason, forced = selection.file(entry.name, child_rel, scope)
        if reason is not None:
            if not scope.restricted:
                result.skipped[reason] += 1
            continue
        # Include globs and folder negations do not take a credential back: only its own
        # `!path` line in .fathomignore does.
        taken_back = selection.taken_back(child_rel, scope)
        if not taken_back and secret_by_name(child_rel):
            result.secret(child_rel)
            continue
        reason = None if forced else _reason_by_name(entry.name.lower())
        if reason is not None:
            result.skipped[reason] += 1
            continue
        try:
            size = entry.stat(follow_symlinks=False).st_size
        except OSError:
            size = 0  # the read will say why
        yield Candidate(entry.path, child_rel, size, child_escaped, taken_back)


def _is_virtualenv(path: str) -> bool:
    # Virtualenvs go by any name (env/, .env-3.11/); the pyvenv.cfg file gives them away.
    return os.path.isfile(os.path.join(path, "pyvenv.cfg"))


def _consider_file(candidate: Candidate, max_file_bytes: int,
                   result: WalkResult) -> SourceFile | None:
    rel = candidate.rel
    try:
        raw = read_regular(candidate.path, max_file_bytes)
    except _Unreadable as exc:
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
    if not candidate.taken_back and find_secret(text, rel) is not None:
        # Left out whole: a chunk of the file without the key is still the file around it
        # (a config's other passwords, the key's name and use). Named, never quoted.
        result.secret(rel)
        return None
    language, table = detect_language(rel)
    source = SourceFile(path=rel, text=text, language=language, table=table, size=size, encoding=encoding)
    if source.lossy:
        result.decoded_with_replacement.append(rel)
    if candidate.escaped:
        result.escaped_names.append(rel)
    return source


def _reason_by_name(name: str) -> str | None:
    if name in GENERATED_NAMES or name.endswith(GENERATED_SUFFIXES):
        return GENERATED
    suffix = os.path.splitext(name)[1]
    if suffix in BINARY_SUFFIXES:
        return BINARY
    if suffix in DATA_SUFFIXES:
        return DATA
    return None


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
