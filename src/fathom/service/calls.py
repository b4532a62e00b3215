"""Navigation by calls over the index: the callers of a definition, its callees, and its
impact (the transitive callers up to a depth), in one project or across every project the
caller sees. The MCP tool `find_calls` and the `fathom calls` command answer from here.

What it owns: validating the arguments (the name, the direction, the depth) before anything is
read, and choosing what is asked about: the definitions `name` names (as `find_symbol` finds
them), read from symbol tables brought up to date first (`symbols.fresh_projects`, so the live
sync's edits are seen as they are by `find_symbol`).

It refuses to resolve anything itself (`fathom.index.symbols.calls` does) and to run on the
event loop: every function here blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fathom.errors import ConfigError
from fathom.index.symbols import calls as graph
from fathom.index.symbols.table import SymbolRow
from fathom.service.symbols import check_name, fresh_projects, table_of, table_path

if TYPE_CHECKING:
    from fathom.service.ports import SymbolSource

DIRECTIONS = ("callers", "callees", "impact")
MAX_DEPTH = 5
DEFAULT_DEPTH = 2
# The most definitions one `callees` answer lists the calls of (a name defined in every class).
MAX_CALLEE_DEFINITIONS = 50


@dataclass(frozen=True)
class CallAnswer:
    direction: str
    definitions: list[SymbolRow]  # what `name` names: the definitions asked about
    calls: list[graph.Call] = field(default_factory=list)  # callers and callees
    impacted: list[graph.Impacted] = field(default_factory=list)  # impact, nearest first
    notes: list[str] = field(default_factory=list)  # projects left out (damaged)
    truncated: bool = False  # a bound was reached: the first ones only


def check_direction(direction: str, depth: int) -> None:
    if direction not in DIRECTIONS:
        raise ConfigError(
            f"direction {direction!r} is not one of {', '.join(DIRECTIONS)}: "
            f"callers (who calls it), callees (what it calls) or impact (who "
            f"calls it, transitively)"
        )
    if not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
        raise ConfigError(
            f"depth {depth!r} is out of range: give 1 to {MAX_DEPTH} (how many calls away impact looks)"
        )


def find_calls(
    fathom: SymbolSource,
    name: str,
    *,
    direction: str = "callers",
    project: str | None = None,
    depth: int = DEFAULT_DEPTH,
) -> CallAnswer:
    """The callers, callees or impact of the definitions `name` names."""
    dotted = check_name(name)
    check_direction(direction, depth)
    projects, notes = fresh_projects(fathom, project)
    table = table_of(fathom)
    definitions, truncated = table.definitions(projects, dotted)
    with table.snapshot() as conn:
        if direction == "callers":
            found, cut = graph.callers(conn, projects, definitions)
            return CallAnswer(direction, definitions, calls=found, notes=notes, truncated=truncated or cut)
        if direction == "callees":
            made = [c for d in definitions[:MAX_CALLEE_DEFINITIONS] for c in graph.callees(conn, d)]
            return CallAnswer(
                direction,
                definitions,
                calls=made,
                notes=notes,
                truncated=truncated or len(definitions) > MAX_CALLEE_DEFINITIONS,
            )
        impacted, stopped = graph.impact(conn, projects, definitions, depth)
    return CallAnswer(direction, definitions, impacted=impacted, notes=notes, truncated=truncated or stopped)


def has_symbols(fathom: SymbolSource) -> bool:
    """Whether any project's symbols are in the table (where `find_calls` is listed): one
    read of a file that exists, nothing made where none does. Asked after every MCP request,
    so it reads the table only when the table's files changed since it last did: a write
    from this process or another (a commit appends to the write-ahead log, a checkpoint
    rewrites the file) changes their size or time."""
    path = table_path(fathom)
    signature = _signature(path)
    if signature[0] is None:
        return False
    seen = _SEEN.get(path)
    if seen is not None and seen[0] == signature:
        return seen[1]
    with table_of(fathom).snapshot() as conn:
        found = conn.execute("SELECT 1 FROM files LIMIT 1").fetchone() is not None
    _SEEN[path] = (signature, found)  # the signature from before the read: a write since reads again
    return found


# The symbol table's files as `has_symbols` last read them, and what it found.
_SEEN: dict[Path, tuple[tuple[tuple[int, int, int] | None, ...], bool]] = {}


def _signature(path: Path) -> tuple[tuple[int, int, int] | None, ...]:
    """(inode, modification time, size) of the table's file and of its write-ahead log."""
    out: list[tuple[int, int, int] | None] = []
    for file in (path, path.with_name(path.name + "-wal")):
        try:
            st = file.stat()
        except FileNotFoundError:
            out.append(None)
        else:
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)
