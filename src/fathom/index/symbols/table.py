"""The symbol table: every project's definitions and identifier occurrences, in one SQLite file
(`symbols.sqlite` in the data dir), built from what the index holds.

What it owns: the file's schema, and keeping it true to the store (`refresh`): a project's
code table is read through the store's manifest (chunk ids by path), a file whose chunk ids
changed since it was last read is put back together from its chunks (`reading.assemble`, as
`read_code` does) and parsed again (`extract`), a file gone from the index is forgotten. So
it works on every store backend alike, never reads the project folder, and always answers
for the version of a file the index holds (the one search hits and `read_code` show). A
manifest identical to the last one read costs one digest and no parse. The queries
`find_symbol`, `find_references` and `outline` answer from.

It refuses to decide who sees what: it answers for the projects it is given (the caller's
scope decides which), and reads the store it is handed (the caller's scoped view).
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fathom.errors import StoreError
from fathom.index.chunkers.languages import detect_language
from fathom.index.reading import assemble
from fathom.index.symbols.extract import LANGUAGES, USES, FileSymbols, extract

# How many chunk ids one read of the store asks for (a query's IN list stays small).
BATCH = 500
# The most references one query returns: a name as common as `self` is everywhere.
MAX_REFERENCES = 5000
# The most definitions one query returns: a name as common as `__init__` is in every class.
MAX_DEFINITIONS = 2000
# How many files one refresh parses before it writes them (in one short transaction).
FILES_PER_WRITE = 200

SCHEMA = """
CREATE TABLE IF NOT EXISTS projects (project TEXT PRIMARY KEY, digest TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    project TEXT NOT NULL, path TEXT NOT NULL, key TEXT NOT NULL, language TEXT NOT NULL,
    text TEXT NOT NULL, PRIMARY KEY (project, path));
CREATE TABLE IF NOT EXISTS symbols (
    project TEXT NOT NULL, path TEXT NOT NULL, language TEXT NOT NULL, name TEXT NOT NULL,
    qualname TEXT NOT NULL, kind TEXT NOT NULL, signature TEXT NOT NULL,
    start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, parent TEXT, depth INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS symbols_name ON symbols (name, project);
CREATE INDEX IF NOT EXISTS symbols_file ON symbols (project, path, start_line);
CREATE TABLE IF NOT EXISTS refs (
    project TEXT NOT NULL, path TEXT NOT NULL, name TEXT NOT NULL, line INTEGER NOT NULL,
    col INTEGER NOT NULL, use TEXT NOT NULL, enclosing TEXT, receiver TEXT);
CREATE INDEX IF NOT EXISTS refs_name ON refs (name, project);
CREATE INDEX IF NOT EXISTS refs_file ON refs (project, path);
CREATE TABLE IF NOT EXISTS imports (
    project TEXT NOT NULL, path TEXT NOT NULL, local TEXT NOT NULL, module TEXT NOT NULL,
    original TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS imports_file ON imports (project, path);
"""
# The layout `SCHEMA` writes. A file of an older one (refs without receivers, no imports) is
# brought to it by parsing every file again: its tables hold nothing the index does not.
VERSION = 1
TABLES = ("files", "symbols", "refs", "imports")


@dataclass(frozen=True)
class SymbolRow:
    project: str
    path: str
    language: str
    name: str
    qualname: str
    kind: str
    signature: str
    start_line: int
    end_line: int
    parent: str | None
    depth: int


@dataclass(frozen=True)
class ReferenceRow:
    project: str
    path: str
    language: str
    name: str
    line: int
    column: int
    use: str
    enclosing: str | None
    text: str  # the line it is on, as indexed
    receiver: str | None = None  # what the name is reached through (`self`, `httpx`)
    # How surely it reaches the definition asked for (`calls.RESOLUTIONS`): graded by
    # `find_references`, name-only until then.
    resolution: str = "name-only"


@dataclass(frozen=True)
class Refreshed:
    """What one refresh of a project did."""

    project: str
    parsed: int  # files read from the store and parsed again
    forgotten: int  # files gone from the index
    unchanged: bool  # the manifest was the one last read: nothing was looked at


class SymbolTableError(StoreError):
    """The symbol table's SQLite file failed: busy past the wait, or unreadable (corrupt,
    not a database, no permission). It holds nothing the index does not: removing it is safe."""

    def __init__(self, path: Path, exc: sqlite3.Error):
        self.path, self.detail = Path(path), " ".join(str(exc).split())[:200]
        self.busy = "locked" in self.detail or "busy" in self.detail
        if self.busy:
            message = (
                f"the symbol table {self.path} stayed locked by another writer for over "
                f"30 seconds ({self.detail}): run the same request again"
            )
        else:
            message = (
                f"the symbol table {self.path} cannot be read ({self.detail}): remove "
                f"that file (symbols.sqlite in the data dir, with its -wal and -shm "
                f"files if present); Fathom rebuilds it from "
                f"the index at the next symbol query"
            )
        super().__init__(message)


def _digest(parts: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]


class SymbolTable:
    """One SQLite file; a connection per call (calls come from worker threads)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._locks: dict[str, threading.Lock] = defaultdict(threading.Lock)
        self._guard = threading.Lock()
        with self._connect() as conn:
            _migrate(conn)
        self.path.chmod(0o600)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A connection in one transaction; any SQLite failure, here or in the caller's
        statements, comes out as a `SymbolTableError` naming the fix."""
        fresh = not self.path.exists()
        try:
            conn = sqlite3.connect(self.path, timeout=30)
        except sqlite3.Error as exc:
            raise SymbolTableError(self.path, exc) from exc
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            if fresh:  # new, or removed since (a damaged one): made again, filled by refresh
                _migrate(conn)
                self.path.chmod(0o600)
            with conn:  # one transaction: committed whole, or rolled back whole
                yield conn
        except sqlite3.Error as exc:
            raise SymbolTableError(self.path, exc) from exc
        finally:
            conn.close()

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: what a query reads in it comes from one version of the
        table, whatever a refresh writes meanwhile (`calls` resolves over it)."""
        with self._connect() as conn:
            conn.execute("BEGIN")
            yield conn

    def _lock(self, project: str) -> threading.Lock:
        with self._guard:
            return self._locks[project]

    # ---- keeping it true to the store

    def refresh(self, store: Any, project: str) -> Refreshed:
        """Bring `project`'s symbols to what `store`'s active code table holds."""
        with self._lock(project):
            manifest = store.manifest(project, "code")
            digest = _digest(sorted(e.chunk_id for e in manifest))
            with self._connect() as conn:
                row = conn.execute("SELECT digest FROM projects WHERE project = ?", (project,)).fetchone()
                if row is not None and row[0] == digest:
                    return Refreshed(project, 0, 0, True)
                known = dict(
                    conn.execute("SELECT path, key FROM files WHERE project = ?", (project,)).fetchall()
                )
            ids: dict[str, list[str]] = defaultdict(list)
            for entry in manifest:
                if detect_language(entry.path)[0] in LANGUAGES:
                    ids[entry.path].append(entry.chunk_id)
            keys = {path: _digest(sorted(chunk_ids)) for path, chunk_ids in ids.items()}
            changed = [p for p, key in keys.items() if known.get(p) != key]
            gone = [p for p in known if p not in keys]
            # Parsed a batch at a time, outside any write: the write transaction only
            # deletes and inserts, so it holds the file's lock briefly and memory stays
            # bounded by one batch. The digest is recorded with the last batch, so a refresh
            # cut short reads the rest again next time.
            batches = [changed[i : i + FILES_PER_WRITE] for i in range(0, len(changed), FILES_PER_WRITE)] or [
                []
            ]
            for n, batch in enumerate(batches):
                files = self._read(store, project, [i for p in batch for i in ids[p]])
                parsed = []
                for path in batch:
                    language, text = files.get(path, (detect_language(path)[0], None))
                    # A file the store no longer holds whole (an index run between the two
                    # reads): kept under an empty key, so the next refresh reads it again.
                    parsed.append(
                        (
                            path,
                            "" if text is None else keys[path],
                            language,
                            text or "",
                            extract(text or "", language),
                        )
                    )
                del files
                last = n == len(batches) - 1
                with self._connect() as conn:
                    for path in batch + (gone if last else []):
                        for table in TABLES:
                            conn.execute(
                                f"DELETE FROM {table} WHERE project = ? AND path = ?", (project, path)
                            )
                    for path, key, language, text, found in parsed:
                        self._write(conn, project, path, key, language, text, found)
                    if last:
                        conn.execute(
                            "INSERT OR REPLACE INTO projects (project, digest) VALUES (?, ?)",
                            (project, digest),
                        )
            return Refreshed(project, len(changed), len(gone), False)

    @staticmethod
    def _read(store: Any, project: str, chunk_ids: list[str]) -> dict[str, tuple[str, str]]:
        """(language, text) of every file these chunk ids cover, as the index holds it."""
        by_path: dict[str, list[Any]] = defaultdict(list)
        for start in range(0, len(chunk_ids), BATCH):
            for chunk in store.chunks(project, "code", chunk_ids=chunk_ids[start : start + BATCH]):
                by_path[chunk.path].append(chunk)
        out: dict[str, tuple[str, str]] = {}
        for path, chunks in by_path.items():
            indexed = assemble(project, path, chunks)
            if indexed is not None:
                # A line longer than a chunk is held in pieces: parsed as blank.
                out[path] = (indexed.language, "\n".join(line or "" for line in indexed.lines))
        return out

    @staticmethod
    def _write(
        conn: sqlite3.Connection,
        project: str,
        path: str,
        key: str,
        language: str,
        text: str,
        found: FileSymbols,
    ) -> None:
        conn.execute(
            "INSERT INTO files (project, path, key, language, text) VALUES (?, ?, ?, ?, ?)",
            (project, path, key, language, text),
        )
        conn.executemany(
            "INSERT INTO symbols VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    project,
                    path,
                    language,
                    d.name,
                    d.qualname,
                    d.kind,
                    d.signature,
                    d.start_line,
                    d.end_line,
                    d.parent,
                    d.depth,
                )
                for d in found.definitions
            ],
        )
        conn.executemany(
            "INSERT INTO refs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (project, path, o.name, o.line, o.column, o.use, o.enclosing, o.receiver)
                for o in found.occurrences
            ],
        )
        conn.executemany(
            "INSERT INTO imports VALUES (?, ?, ?, ?, ?)",
            [(project, path, b.local, b.module, b.original) for b in found.bindings],
        )

    def forget(self, project: str) -> None:
        with self._lock(project), self._connect() as conn:
            for table in ("projects", *TABLES):
                conn.execute(f"DELETE FROM {table} WHERE project = ?", (project,))

    # ---- queries

    def definitions(
        self, projects: Sequence[str], name: str, *, kind: str | None = None, language: str | None = None
    ) -> tuple[list[SymbolRow], bool]:
        """Definitions whose qualified name is `name` or ends with `.name`, by project,
        path and line; and whether more than `MAX_DEFINITIONS` were found (the rest left out)."""
        last = name.rsplit(".", 1)[-1]
        query = (
            f"SELECT * FROM symbols WHERE name = ? AND project IN ({_marks(projects)}) "
            f"AND (qualname = ? OR substr(qualname, -?) = ?)"
        )
        args: list[Any] = [last, *projects, name, len(name) + 1, "." + name]
        if kind is not None:
            query, args = query + " AND kind = ?", [*args, kind]
        if language is not None:
            query, args = query + " AND language = ?", [*args, language]
        with self._connect() as conn:
            rows = [
                SymbolRow(*r)
                for r in conn.execute(
                    query + " ORDER BY project, path, start_line LIMIT ?", [*args, MAX_DEFINITIONS + 1]
                ).fetchall()
            ]
        return rows[:MAX_DEFINITIONS], len(rows) > MAX_DEFINITIONS

    def references(self, projects: Sequence[str], name: str) -> tuple[list[ReferenceRow], bool]:
        """Where `name` is used, calls first, then imports, then mentions (each by project,
        path, line); and whether more than `MAX_REFERENCES` were found (the rest left out)."""
        order = " ".join(f"WHEN '{u}' THEN {i}" for i, u in enumerate(USES))
        with self._connect() as conn:
            # One read transaction: the rows and the file texts come from one snapshot, so a
            # refresh that rewrites or forgets a file meanwhile changes neither.
            conn.execute("BEGIN")
            rows = conn.execute(
                f"SELECT r.project, r.path, f.language, r.name, r.line, r.col, r.use, "
                f"r.enclosing, r.receiver FROM refs AS r JOIN files AS f ON f.project = r.project AND "
                f"f.path = r.path WHERE r.name = ? AND r.project IN ({_marks(projects)}) "
                f"ORDER BY CASE r.use {order} END, r.project, r.path, r.line, r.col LIMIT ?",
                [name, *projects, MAX_REFERENCES + 1],
            ).fetchall()
            wanted: dict[tuple[str, str], set[int]] = defaultdict(set)
            for row in rows[:MAX_REFERENCES]:
                wanted[(row[0], row[1])].add(row[4])
            # Only the lines a reference is on are kept, one file's text read at a time.
            at: dict[tuple[str, str], dict[int, str]] = {}
            for (project, path), lines in wanted.items():
                found = conn.execute(
                    "SELECT text FROM files WHERE project = ? AND path = ?", (project, path)
                ).fetchone()
                if found is not None:
                    text = found[0].split("\n")
                    at[(project, path)] = {n: text[n - 1].strip() if n <= len(text) else "" for n in lines}
        out = [
            ReferenceRow(
                project, path, language, ref, line, col, use, enclosing, at[(project, path)][line], receiver
            )
            for project, path, language, ref, line, col, use, enclosing, receiver in rows[:MAX_REFERENCES]
            if (project, path) in at
        ]
        return out, len(rows) > MAX_REFERENCES

    def files(self, projects: Sequence[str]) -> list[tuple[str, str]]:
        """(project, path) of every file with symbols the table holds for these projects."""
        with self._connect() as conn:
            return [
                tuple(r)
                for r in conn.execute(
                    f"SELECT project, path FROM files WHERE project IN ({_marks(projects)}) "
                    f"ORDER BY project, path",
                    list(projects),
                ).fetchall()
            ]

    def outline(self, project: str, path: str) -> list[SymbolRow]:
        """The definitions of one file, in the order they appear (a host before its members)."""
        with self._connect() as conn:
            return [
                SymbolRow(*r)
                for r in conn.execute(
                    "SELECT * FROM symbols WHERE project = ? AND path = ? ORDER BY start_line, depth",
                    (project, path),
                ).fetchall()
            ]


def _migrate(conn: sqlite3.Connection) -> None:
    """Bring the file to `VERSION`: an older layout's derived tables are made again and every
    file is marked to be parsed again at its project's next refresh."""
    if conn.execute("PRAGMA user_version").fetchone()[0] < VERSION:
        conn.execute("DROP TABLE IF EXISTS refs")
        conn.executescript(SCHEMA)
        conn.execute("UPDATE files SET key = ''")
        conn.execute("DELETE FROM projects")
        conn.execute(f"PRAGMA user_version = {VERSION}")
    else:
        conn.executescript(SCHEMA)


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" * len(values)) or "NULL"
