"""Resolving a name's use to the definitions it can reach, from what the symbol table holds of
the parse: the file's imports (`Binding`s), the definitions around the use, and what the name
is reached through (`self.send`, `httpx.get`, `client.send`). No language server, no types.

What it owns: the three grades a use gets against a definition, best first (`RESOLUTIONS`):
`resolved` (the file makes it knowable: a definition in scope in the same file, an imported
name or module, `self.`/`this.` inside the class that defines the method, a Go method's own
receiver, a package of the same folder in Go), `likely` (the same name and a compatible
receiver: a method called on an object whose type the file does not say) and `name-only`
(nothing more than the name: a builtin's `print()` against `Console.print`); and the call
graph built from them: the callers of a definition, its callees, and the transitive callers
(impact). docs/calls.md says per language what this can and cannot know.

It refuses to decide which projects it reads (the caller passes them, scoped), to hold any
state across queries (a `Resolver` lives for one query, over one read snapshot), and to guess
a type: a method called on a variable is `likely` to be any method of that name.
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from fathom.index.symbols.imports import READ_LANGUAGES
from fathom.index.symbols.table import ReferenceRow, SymbolRow

RESOLUTIONS = ("resolved", "likely", "name-only")
# What a method reaches its own object through, by language.
SELF = frozenset({"self", "this", "cls", "$this", "@", "Self", "static"})
SUPER = frozenset({"super", "super()", "parent", "base"})
# Languages where a bare name inside a class reaches the class's own members.
IMPLICIT_SELF = frozenset({"java", "csharp", "kotlin", "cpp", "scala", "swift", "ruby"})
# Languages where a bare name reaches another file's definition with no import (a package, a
# header, a global): such a definition is `likely`; elsewhere an unimported name is a builtin
# or a local as far as the file says.
SHARED_SCOPE = frozenset(
    {"c", "cpp", "java", "csharp", "kotlin", "scala", "swift", "php", "ruby", "lua", "shell", "rust"}
)
_INDEX_FILES = frozenset({"__init__", "index", "mod", "lib", "main"})
_GO_RECEIVER = re.compile(r"^func\s*\(\s*(\w+)\s+\*?\s*(\w+)")
_IDENTIFIER = re.compile(r"^[\w$]+$")
# The base classes a class's head names: `class A(B, mod.C)`, `class A extends B`.
_PY_BASES = re.compile(r"^class\s+\w+\s*\((.*)\)\s*$")
_EXTENDS = re.compile(r"\bextends\s+([\w$.]+)")
MAX_BASES = 8  # classes looked through for an inherited method
# The most call sites one callers or callees query resolves, and the most definitions an
# impact walk visits: a name as common as `get` must not read a whole project.
MAX_SITES = 5000
MAX_IMPACT = 500


@dataclass(frozen=True)
class Resolution:
    how: str  # one of RESOLUTIONS
    targets: tuple[SymbolRow, ...]  # the definitions it reaches (resolved) or may (likely)


@dataclass(frozen=True)
class Call:
    """A call site with what it resolved to: a caller's line, or a callee's."""

    site: ReferenceRow
    how: str
    targets: tuple[SymbolRow, ...]


def _key(row: SymbolRow) -> tuple[str, str, str]:
    return (row.project, row.path, row.qualname)


def _module_names(module: str, original: str) -> set[str]:
    """The file or folder names a module import may name: `._models` -> `_models`; `from .
    import _utils` -> `_utils`; `net/http` -> `http`."""
    parts = [p for p in re.split(r"[./\\:]+", module) if p]
    names = {parts[-1]} if parts else set()
    if original != module and _IDENTIFIER.match(original):
        names.add(original)  # `from pkg import mod`: the name may be a module itself
    return names


def _in_module(path: str, names: set[str]) -> bool:
    folders = path.split("/")
    stem = folders[-1].rsplit(".", 1)[0]
    if stem in _INDEX_FILES and len(folders) > 1:
        stem = folders[-2]
    return stem in names or (len(folders) > 1 and folders[-2] in names)


def _folder(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


class Resolver:
    """Resolves the uses of one project's names, over one read snapshot of the table."""

    def __init__(self, conn: sqlite3.Connection, project: str):
        self.conn, self.project = conn, project
        self._named: dict[str, list[SymbolRow]] = {}
        self._files: dict[str, dict[str, SymbolRow]] = {}
        self._bindings: dict[str, dict[str, tuple[str, str]]] = {}
        self._imported: dict[str, set[str]] = {}
        self._parts: set[str] | None = None

    def named(self, name: str) -> list[SymbolRow]:
        if name not in self._named:
            self._named[name] = [
                SymbolRow(*r)
                for r in self.conn.execute(
                    "SELECT * FROM symbols WHERE name = ? AND project = ? ORDER BY path, start_line",
                    (name, self.project),
                ).fetchall()
            ]
        return self._named[name]

    def defined_in(self, path: str) -> dict[str, SymbolRow]:
        if path not in self._files:
            rows = [
                SymbolRow(*r)
                for r in self.conn.execute(
                    "SELECT * FROM symbols WHERE project = ? AND path = ? ORDER BY start_line DESC",
                    (self.project, path),
                ).fetchall()
            ]
            self._files[path] = {r.qualname: r for r in rows}  # the first of a name wins
        return self._files[path]

    def bindings(self, path: str) -> dict[str, tuple[str, str]]:
        if path not in self._bindings:
            self._bindings[path] = {
                local: (module, original)
                for local, module, original in self.conn.execute(
                    "SELECT local, module, original FROM imports WHERE project = ? AND path = ?",
                    (self.project, path),
                )
            }
            self._imported[path] = {
                n
                for (n,) in self.conn.execute(
                    "SELECT name FROM refs WHERE project = ? AND path = ? AND use = 'import'",
                    (self.project, path),
                )
            }
        return self._bindings[path]

    def _local(self, module: str, language: str) -> bool:
        """Whether a module an import names may be in the project: relative (`._models`,
        `./m`), or its first part (Go: its last, the package's folder) is the project's name
        or one of its folders or files."""
        if module.startswith("."):
            return True
        if self._parts is None:
            self._parts = {self.project}
            for (path,) in self.conn.execute("SELECT path FROM files WHERE project = ?", (self.project,)):
                *folders, name = path.split("/")
                self._parts.update(folders, [name.rsplit(".", 1)[0]])
        parts = [p for p in re.split(r"[./\\:]+", module) if p] or [""]
        return parts[-1 if language == "go" else 0] in self._parts

    def resolve(self, site: ReferenceRow) -> Resolution:
        """What `site` (a use of a name, in this project) reaches."""
        candidates = self.named(site.name)
        receiver = site.receiver
        binding = self.bindings(site.path).get(site.name) if receiver is None else None
        if binding is not None and binding[1] != site.name:  # imported under another name
            candidates = self.named(binding[1].rsplit(".", 1)[-1])
        if not candidates:
            return Resolution("name-only", ())
        if receiver is None:
            return self._bare(site, candidates)
        methods = tuple(c for c in candidates if c.kind == "method")
        if receiver in SELF or receiver == self._go_receiver(site):
            host = self._host(site)
            own = self._member(site, host, methods) if host is not None else ()
            if own:
                return Resolution("resolved", own)
        elif _IDENTIFIER.match(receiver) and receiver not in SUPER:
            reached = self._through(site, receiver, candidates)
            if reached:
                return Resolution("resolved", reached)
        return Resolution("likely", methods) if methods else Resolution("name-only", ())

    def _bare(self, site: ReferenceRow, candidates: list[SymbolRow]) -> Resolution:
        binding = self.bindings(site.path).get(site.name)
        if site.use == "import" and binding is None:
            binding = next(((m, o) for m, o in self.bindings(site.path).values() if o == site.name), None)
        if site.use != "import":
            local = self._in_scope(site, candidates)
            if local:
                return Resolution("resolved", local)
        tops = [c for c in candidates if c.kind != "method" and c.depth == 0]
        if binding is not None:
            module, original = binding
            if original != site.name:
                tops = [c for c in self.named(original) if c.kind != "method" and c.depth == 0]
            inside = tuple(c for c in tops if _in_module(c.path, _module_names(module, module)))
            if inside:
                return Resolution("resolved", inside)
        imported = binding is not None or (
            site.language not in READ_LANGUAGES and site.name in self._imported.get(site.path, ())
        )
        if binding is not None and not self._local(binding[0], site.language):
            return Resolution("name-only", ())  # from a module outside the project
        if imported and tops:
            return Resolution("resolved" if len(tops) == 1 else "likely", tuple(tops))
        if site.language == "go":
            package = tuple(c for c in tops if _folder(c.path) == _folder(site.path))
            if package:
                return Resolution("resolved", package)
        if site.language in SHARED_SCOPE and tops:
            return Resolution("likely", tuple(tops))
        return Resolution("name-only", ())

    def _in_scope(self, site: ReferenceRow, candidates: list[SymbolRow]) -> tuple[SymbolRow, ...]:
        """Definitions of the name the same file puts in scope at the site: at its top level,
        in a function around it, or (where the language reaches members bare) in its class."""
        defined = self.defined_in(site.path)
        scopes: list[str | None] = [None]
        if site.enclosing:
            parts = site.enclosing.split(".")
            scopes += [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
        host = self._host(site)
        for scope in reversed(scopes):  # the innermost first
            found = tuple(c for c in candidates if c.path == site.path and c.parent == scope)
            is_class = scope is not None and scope in defined and defined[scope].kind == "class"
            if found and (not is_class or site.language in IMPLICIT_SELF):
                return found
        if host is not None and site.language in IMPLICIT_SELF:  # members declared elsewhere
            return tuple(
                c
                for c in candidates
                if c.qualname == f"{host.qualname}.{site.name}" and self._same_unit(site, c)
            )
        return ()

    def _through(
        self, site: ReferenceRow, receiver: str, candidates: list[SymbolRow]
    ) -> tuple[SymbolRow, ...]:
        """`receiver.name` where the receiver is an imported module or class, or a class of
        the file: the definitions it names."""
        binding = self.bindings(site.path).get(receiver)
        if binding is not None and not self._local(binding[0], site.language):
            return ()
        if binding is not None:
            module, original = binding
            names = _module_names(module, original)
            found = tuple(
                c for c in candidates if c.depth == 0 and c.kind != "method" and _in_module(c.path, names)
            )
            if found:
                return found
            receiver = original.rsplit(".", 1)[-1]  # an imported class
        members = tuple(
            c
            for c in candidates
            if c.qualname == f"{receiver}.{site.name}" or c.qualname.endswith(f".{receiver}.{site.name}")
        )
        if binding is not None or receiver in self.defined_in(site.path):
            return members
        return ()

    def _member(
        self, site: ReferenceRow, host: SymbolRow, methods: tuple[SymbolRow, ...]
    ) -> tuple[SymbolRow, ...]:
        """The method `site.name` of `host`, or of the nearest base class (named in the class's
        head and found in the project) that defines it."""
        classes, seen = [host], set()
        for _ in range(MAX_BASES):
            if not classes:
                break
            cls = classes.pop(0)
            if _key(cls) in seen:
                continue
            seen.add(_key(cls))
            own = tuple(
                c
                for c in methods
                if c.qualname == f"{cls.qualname}.{site.name}"
                and (c.path == cls.path or (site.language == "go" and _folder(c.path) == _folder(cls.path)))
            )
            if own:
                return own
            classes += [b for name in _bases(cls.signature) if (b := self._class(cls, name))]
        return ()

    def _class(self, by: SymbolRow, name: str) -> SymbolRow | None:
        """The class `name` as the file of `by` reaches it: its own, imported, or the only one."""
        local, _, last = name.rpartition(".")
        found = [c for c in self.named(last) if c.kind == "class"]
        same = [c for c in found if c.path == by.path]
        binding = self.bindings(by.path).get(local or last)
        if not same and binding is not None:
            names = _module_names(*binding) if local else _module_names(binding[0], binding[0])
            same = [c for c in found if _in_module(c.path, names)]
        chosen = same or (found if len(found) == 1 else [])
        return chosen[0] if chosen else None

    def _host(self, site: ReferenceRow) -> SymbolRow | None:
        """The class whose code the site is in (the innermost), if any."""
        if not site.enclosing:
            return None
        defined = self.defined_in(site.path)
        parts = site.enclosing.split(".")
        for i in range(len(parts), 0, -1):
            row = defined.get(".".join(parts[:i]))
            if row is not None and row.kind == "class":
                return row
        if site.language == "go" and len(parts) == 2:  # `func (s *S) Do()`: S.Do, S's method
            return self._go_type(site, parts[0])
        return None

    def _go_type(self, site: ReferenceRow, name: str) -> SymbolRow | None:
        return next(
            (c for c in self.named(name) if c.kind == "class" and _folder(c.path) == _folder(site.path)), None
        )

    def _go_receiver(self, site: ReferenceRow) -> str | None:
        if site.language != "go" or not site.enclosing:
            return None
        row = self.defined_in(site.path).get(site.enclosing)
        match = _GO_RECEIVER.match(row.signature) if row is not None else None
        return match.group(1) if match else None

    @staticmethod
    def _same_unit(site: ReferenceRow, row: SymbolRow) -> bool:
        """A member of the site's class: in its file, or (Go) its package."""
        return row.path == site.path or (site.language == "go" and _folder(row.path) == _folder(site.path))


def _bases(signature: str) -> list[str]:
    match = _PY_BASES.match(signature)
    if match:
        return [
            b.strip()
            for b in match.group(1).split(",")
            if b.strip() and "=" not in b and re.match(r"^[\w.]+$", b.strip())
        ]
    return _EXTENDS.findall(signature)


def grade(resolution: Resolution, wanted: set[tuple[str, str, str]]) -> str:
    """The grade of a use against the definitions asked for: a use resolved to another
    definition is `name-only` for this one."""
    if resolution.how == "name-only" or not any(_key(t) in wanted for t in resolution.targets):
        return "name-only"
    return resolution.how


def graded_references(
    conn: sqlite3.Connection, rows: list[ReferenceRow], definitions: list[SymbolRow]
) -> list[tuple[ReferenceRow, str]]:
    """Each reference with its grade against `definitions`, resolved first, then likely,
    then name-only (each in the order given)."""
    wanted = {_key(d) for d in definitions}
    resolvers: dict[str, Resolver] = {}
    out = []
    for row in rows:
        resolver = resolvers.setdefault(row.project, Resolver(conn, row.project))
        out.append((row, grade(resolver.resolve(row), wanted) if wanted else "name-only"))
    order = {how: i for i, how in enumerate(RESOLUTIONS)}
    return sorted(out, key=lambda pair: order[pair[1]])


def sites(
    conn: sqlite3.Connection,
    projects: list[str],
    *,
    name: str | None = None,
    path: str | None = None,
    enclosing: str | None = None,
) -> list[ReferenceRow]:
    """Call sites, by name across projects or within one definition, with their lines."""
    # The index named: left to itself, SQLite reads the whole project's uses by `refs_file`
    # to save a sort, ten times slower for a name than `refs_name`.
    index = "refs_name" if name is not None else "refs_file"
    query = (
        "SELECT r.project, r.path, f.language, r.name, r.line, r.col, r.use, r.enclosing, "
        f"'', r.receiver FROM refs AS r INDEXED BY {index} JOIN files AS f ON "
        f"f.project = r.project AND f.path = r.path WHERE r.use = 'call' AND "
        f"r.project IN ({_marks(projects)})"
    )
    args: list[Any] = list(projects)
    for column, value in (("r.name", name), ("r.path", path), ("r.enclosing", enclosing)):
        if value is not None:
            query, args = query + f" AND {column} = ?", [*args, value]
    rows = [
        ReferenceRow(*r)
        for r in conn.execute(
            query + " ORDER BY r.project, r.path, r.line, r.col LIMIT ?", [*args, MAX_SITES]
        )
    ]
    return _with_text(conn, rows)


def _with_text(conn: sqlite3.Connection, rows: list[ReferenceRow]) -> list[ReferenceRow]:
    lines: dict[tuple[str, str], list[str]] = {}
    out = []
    for row in rows:
        at = (row.project, row.path)
        if at not in lines:
            found = conn.execute("SELECT text FROM files WHERE project = ? AND path = ?", at).fetchone()
            lines[at] = found[0].split("\n") if found else []
        text = lines[at][row.line - 1].strip() if row.line <= len(lines[at]) else ""
        out.append(dataclasses.replace(row, text=text))
    return out


def callers(
    conn: sqlite3.Connection,
    projects: list[str],
    definitions: list[SymbolRow],
    resolvers: dict[str, Resolver] | None = None,
) -> tuple[list[Call], bool]:
    """The call sites that reach one of `definitions`, resolved first, then likely; and
    whether a name had more than `MAX_SITES` call sites (the rest not read). `resolvers`: the
    ones an impact walk keeps across its levels (what they read is cached)."""
    wanted = {_key(d) for d in definitions}
    out: list[Call] = []
    cut = False
    resolvers = resolvers if resolvers is not None else {p: Resolver(conn, p) for p in projects}
    for name in sorted({d.name for d in definitions}):
        found = sites(conn, [p for p in projects if any(d.project == p for d in definitions)], name=name)
        cut = cut or len(found) >= MAX_SITES
        for site in found:
            resolution = resolvers[site.project].resolve(site)
            how = grade(resolution, wanted)
            if how != "name-only":
                out.append(Call(site, how, tuple(t for t in resolution.targets if _key(t) in wanted)))
    return sorted(out, key=lambda c: c.how != "resolved"), cut


def callees(conn: sqlite3.Connection, definition: SymbolRow) -> list[Call]:
    """The calls made in `definition`'s own code, in line order, each with what it reaches."""
    resolver = Resolver(conn, definition.project)
    out = []
    for site in sites(conn, [definition.project], path=definition.path, enclosing=definition.qualname):
        if definition.start_line <= site.line <= definition.end_line:
            resolution = resolver.resolve(site)
            out.append(Call(site, resolution.how, resolution.targets))
    return out


@dataclass(frozen=True)
class Impacted:
    definition: SymbolRow
    depth: int  # 1: calls one of the definitions asked for; 2: calls a caller of one; …
    via: Call  # the call that reaches the definition one level closer


def impact(
    conn: sqlite3.Connection, projects: list[str], definitions: list[SymbolRow], depth: int
) -> tuple[list[Impacted], bool]:
    """The definitions whose calls reach `definitions` within `depth` calls (resolved and
    likely), nearest first; and whether the walk stopped short (`MAX_IMPACT` definitions, or
    a name with more than `MAX_SITES` call sites)."""
    seen = {_key(d) for d in definitions}
    frontier, found = list(definitions), []
    resolvers = {p: Resolver(conn, p) for p in projects}
    cut = False
    for level in range(1, depth + 1):
        following = []
        reached, more = callers(conn, projects, frontier, resolvers)
        cut = cut or more
        for call in reached:
            if not call.site.enclosing:
                continue  # module-level code: nothing calls it
            host = resolvers[call.site.project].defined_in(call.site.path).get(call.site.enclosing)
            if host is None or _key(host) in seen:
                continue
            seen.add(_key(host))
            found.append(Impacted(host, level, call))
            following.append(host)
            if len(found) >= MAX_IMPACT:
                return found, True
        frontier = following
        if not frontier:
            break
    return found, cut


def edges(conn: sqlite3.Connection, project: str) -> list[tuple[SymbolRow, SymbolRow, str]]:
    """Every (caller, callee, grade) of a project whose call resolves or likely does: what
    bench/call_graph.py measures against an independent walk."""
    resolver = Resolver(conn, project)
    out: list[tuple[SymbolRow, SymbolRow, str]] = []
    for path, enclosing, *rest in conn.execute(
        "SELECT r.path, r.enclosing, f.language, r.name, r.line, r.col, r.use, r.receiver "
        "FROM refs AS r JOIN files AS f ON f.project = r.project AND f.path = r.path "
        "WHERE r.use = 'call' AND r.project = ? AND r.enclosing IS NOT NULL",
        (project,),
    ):
        language, name, line, col, use, receiver = rest
        caller = resolver.defined_in(path).get(enclosing)
        if caller is None:
            continue
        site = ReferenceRow(project, path, language, name, line, col, use, enclosing, "", receiver)
        resolution = resolver.resolve(site)
        out.extend((caller, target, resolution.how) for target in resolution.targets)
    return out


def _marks(values: list[str]) -> str:
    return ", ".join("?" * len(values)) or "NULL"


def by_file(found: list[Impacted]) -> dict[tuple[str, str], list[Impacted]]:
    grouped: dict[tuple[str, str], list[Impacted]] = defaultdict(list)
    for item in found:
        grouped[(item.definition.project, item.definition.path)].append(item)
    return dict(grouped)
