"""Symbol navigation over the index: `find_symbol`, `find_references` and `outline`, in one
project or across every project the caller sees.

What it owns: which projects a query reads (the caller's scope, through `Fathom.store`: a
project outside it is "no such project", and "every project" means every project of the
scope), bringing their symbol tables up to date before it answers (a refresh that finds the
index unchanged is one manifest read), the refresh after an index run, and the validation of
every argument before anything is read.

It refuses to parse or store anything itself (`fathom.index.symbols`) and to run on the event
loop: every function here blocks (run it in a worker thread).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fathom.errors import ConfigError
from fathom.index.results import skipped_note
from fathom.index.store import DamagedProject
from fathom.index.symbols import calls
from fathom.index.symbols.extract import LANGUAGES
from fathom.index.symbols.table import SymbolRow, SymbolTable

if TYPE_CHECKING:
    from fathom.service.ports import Configured, IndexedData, SymbolSource

log = logging.getLogger(__name__)

KINDS = ("function", "method", "class", "module", "type", "macro", "other")
MAX_NAME = 500
# A name as a language writes it: letters, digits, `_`, `$`, and `.`, `::`, `\`, `:` or `#`
# between the parts of a qualified one.
_NAME = re.compile(r"^[\w$]+((\.|::|\\|:|#)[\w$]+)*$")


_tables: dict[str, SymbolTable] = {}
_tables_lock = threading.Lock()  # two first uses at once build one table, not two


def table_path(fathom: Configured) -> Path:
    return Path(fathom.settings.data_dir).expanduser() / "symbols.sqlite"


def table_of(fathom: Configured) -> SymbolTable:
    """The symbol table of the service's data dir (one per process and data dir)."""
    path = str(table_path(fathom))
    with _tables_lock:
        table = _tables.get(path)
        if table is None:
            table = _tables[path] = SymbolTable(Path(path))
        return table


def check_name(name: str, what: str = "name") -> str:
    """The name, dotted, or a `ConfigError` that says what a name looks like."""
    name = (name or "").strip()
    if not name or len(name) > MAX_NAME or not _NAME.match(name):
        raise ConfigError(
            f"{what} {name[:80]!r} is not an identifier: give a name as the code "
            f"writes it (`send`), or qualified by its class or module "
            f"(`AsyncClient.send`), up to {MAX_NAME} characters"
        )
    return re.sub(r"::|\\|:|#", ".", name)


def _check_filters(kind: str | None, language: str | None) -> None:
    if kind is not None and kind not in KINDS:
        raise ConfigError(f"kind {kind!r} is not a symbol kind: use one of {', '.join(KINDS)}")
    if language is not None and language not in LANGUAGES:
        raise ConfigError(
            f"language {language!r} has no symbols here: use one of {', '.join(sorted(LANGUAGES))}"
        )


@dataclass(frozen=True)
class Found:
    """What a symbol query found, and the projects it left out (damaged), each in a note."""

    rows: list[Any]
    notes: list[str] = field(default_factory=list)
    truncated: bool = False  # more rows than the table returns: the first ones only


def fresh_projects(fathom: SymbolSource, project: str | None) -> tuple[list[str], list[str]]:
    """The projects a query reads (one, or every project of the caller's scope), each with
    its symbol table brought up to date; and notes on those left out. Over every project, a
    damaged one is left out and named; a project asked for by name fails whole."""
    projects, notes = fathom.searchable(project, "code")
    table = table_of(fathom)
    readable = []
    for name in projects:
        try:
            table.refresh(fathom.store, name)
        except DamagedProject as exc:
            if project is not None:
                raise
            notes.append(skipped_note(name, exc.detail))
            continue
        readable.append(name)
    return readable, notes


def find_symbol(
    fathom: SymbolSource,
    name: str,
    *,
    project: str | None = None,
    kind: str | None = None,
    language: str | None = None,
) -> Found:
    """Definitions named `name` (or whose qualified name ends with it), by project, path, line,
    up to the table's bound."""
    dotted = check_name(name)
    _check_filters(kind, language)
    projects, notes = fresh_projects(fathom, project)
    rows, truncated = table_of(fathom).definitions(projects, dotted, kind=kind, language=language)
    return Found(rows, notes, truncated)


def find_references(fathom: SymbolSource, name: str, *, project: str | None = None) -> Found:
    """Where an identifier is used (a qualified name's last part), up to the table's bound:
    each use graded against the definitions `name` names (`calls.RESOLUTIONS`), resolved
    first, then likely, then name-only, and calls first within each."""
    dotted = check_name(name)
    projects, notes = fresh_projects(fathom, project)
    table = table_of(fathom)
    rows, truncated = table.references(projects, dotted.rsplit(".", 1)[-1])
    definitions, _ = table.definitions(projects, dotted)
    with table.snapshot() as conn:
        graded = calls.graded_references(conn, rows, definitions)
    return Found([dataclasses.replace(row, resolution=how) for row, how in graded], notes, truncated)


def outline(
    fathom: SymbolSource, path: str, *, project: str | None = None
) -> tuple[str, str, list[SymbolRow]]:
    """(project, path, definitions in order) of one file: `path` as search results give it,
    or its end (`_client.py`, `httpx/_client.py`) when one indexed file ends so, or a module's
    dotted name (`httpx._client`)."""
    asked = (path or "").strip().replace("\\", "/").removeprefix("./")
    if not asked or len(asked) > 1000:
        raise ConfigError(
            "outline needs `path`: a file path relative to the project root, "
            "as search results give it, or its file name"
        )
    projects, _ = fresh_projects(fathom, project)
    table = table_of(fathom)
    files = table.files(projects)
    exact = [f for f in files if f[1] == asked]
    matches = exact or [f for f in files if _ends_with(f[1], asked)]
    if not matches:
        where = f"project {project!r}" if project else "any project you can see"
        raise ConfigError(
            f"no indexed code file {asked!r} in {where}: give the path relative "
            f"to the project root, as search results give it"
        )
    if len(matches) > 1:
        shown = ", ".join(f"{p}:{f}" for p, f in matches[:10])
        raise ConfigError(
            f"{asked!r} names {len(matches)} files ({shown}"
            f"{', …' if len(matches) > 10 else ''}): give the path, and the "
            f"project"
        )
    found_project, found_path = matches[0]
    return found_project, found_path, table.outline(found_project, found_path)


def _ends_with(path: str, asked: str) -> bool:
    if path.endswith("/" + asked):
        return True
    if "/" in asked or "." not in asked or asked.rsplit(".", 1)[1] == path.rsplit(".", 1)[-1]:
        return False  # a path, a bare name, or a file name with this file's extension
    # A dotted module name: its file or its package, the project's own folder name as its
    # first part or not (`httpx._client` in a project whose root is the `httpx` folder).
    stem = path.rsplit(".", 1)[0].removesuffix("/__init__")
    parts = asked.split(".")
    return any(
        stem == module or stem.endswith("/" + module)
        for module in ("/".join(parts), "/".join(parts[1:]))
        if module
    )


def after_index(fathom: IndexedData, project: str) -> None:
    """Bring one project's symbols up to date after an index run (a sync included). A
    failure here fails no index run: the next query refreshes again, and says why."""
    try:
        table_of(fathom).refresh(fathom.store, project)
    except Exception:
        log.warning(
            "symbols of %s not refreshed after indexing; the next query retries", project, exc_info=True
        )


def forget(fathom: Configured, project: str) -> None:
    """Remove a dropped project's symbols, and the text of its files the table holds."""
    table_of(fathom).forget(project)
