"""One search, as every front end asks it: made once, checked once, then trusted.

What it owns: `SearchRequest`, the arguments of a search — the query, one project or every
one, the table, `k`, the filters, one result per file or per chunk, and a git ref — checked
when it is made (`check_search`, `check_group`, a ref only with its project), so that nothing
below checks them again; and the parameter types the MCP tools and the dashboard's search
box declare (`Query`, `K`, `Language`, `PathGlob`, `Kind`, `Group`, `Ref`), so that the schema a
client is shown and the check a request meets state the same bounds in one place.

Every search path takes a request: the MCP tools `search_code` and `search_docs`, the
dashboard's `POST /admin/search`, `fathom search` in-process and through a running server,
and searches at a git ref (the ref is a field of the request, not a second path: the
service sends a request with a ref, or over a project from git, to its git side).

What it refuses to do: search, or know how a front end spells its arguments (each builds a
request from its own: `SearchRequest.of` takes the filters as the tools and the CLI name them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from fathom.errors import ConfigError, whole_number
from fathom.index.filters import SearchFilter
from fathom.index.store import check_table_kind

MAX_K = 100
GROUPS = ("file", "chunk")
MAX_QUERY = 2000
MAX_REF = 200

# The parameters as a client is shown them (default and bounds included, short: the schema
# goes out with every tool list).
Query = Annotated[
    str,
    Field(
        description="A few words, a question or an identifier, e.g. `retry with backoff`.",
        min_length=1,
        max_length=MAX_QUERY,
    ),
]
K = Annotated[int, Field(description="How many results.", ge=1, le=MAX_K)]
Language = Annotated[
    str | None,
    Field(description="Only this language, lower case (`python`, `typescript`, `markdown`…).", max_length=40),
]
PathGlob = Annotated[
    str | None,
    Field(
        description="Only files matching this glob from the project root (`*.py` at any depth, "
        "`src/` a folder, `**` spans folders).",
        max_length=500,
    ),
]
Kind = Annotated[
    Literal["function", "method", "class"] | None,
    Field(
        description="Only chunks defining this (`class` takes structs, interfaces, traits, "
        "enums); null: any chunk."
    ),
]
Group = Annotated[
    Literal["file", "chunk"],
    Field(description="`file`: a file's best chunk, its other matches in `also`; `chunk`: every chunk."),
]
Ref = Annotated[
    str | None,
    Field(
        description="A git project's branch, tag or commit (with `project`); null: its default branch.",
        max_length=MAX_REF,
    ),
]


def check_group(group: Any) -> str:
    if group not in GROUPS:
        raise ConfigError(
            f"group must be one of {', '.join(GROUPS)} (got {group!r}): 'file' "
            f"answers one result per file with its other matching ranges, "
            f"'chunk' one result per chunk"
        )
    return str(group)


@dataclass(frozen=True)
class SearchRequest:
    """A search's arguments, checked when made (the query, the table, `k`, the group, a ref
    with its project); `where` is a checked `SearchFilter` already (`SearchFilter.of`)."""

    query: str
    project: str | None = None
    table: str = "code"
    k: int = 10
    where: SearchFilter | None = None
    group: str = "file"
    ref: str | None = None

    def __post_init__(self) -> None:
        check_search(self.query, self.table, self.k)
        check_group(self.group)
        if self.ref is not None:
            if not isinstance(self.ref, str) or not self.ref.strip() or len(self.ref) > MAX_REF:
                raise ConfigError(
                    f"ref must name a branch, tag or commit in 1-{MAX_REF} characters (got {self.ref!r})"
                )
            if self.project is None:
                raise ConfigError("ref names a branch, tag or commit of one project: give the project too")

    @classmethod
    def of(
        cls,
        query: Any,
        project: str | None = None,
        table: str = "code",
        k: Any = 10,
        *,
        language: Any = None,
        path: Any = None,
        kind: Any = None,
        group: Any = "file",
        ref: str | None = None,
    ) -> SearchRequest:
        """A request from the arguments as the tools and the CLI name them."""
        return cls(query, project, table, k, SearchFilter.of(language, path, kind), group, ref)

    def arguments(self) -> list[Any]:
        """What a later page must be asked with (its cursor is refused with any other)."""
        extra = (
            [self.ref, self.group] if self.ref is not None else ([self.group] if self.group != "file" else [])
        )
        return [
            self.table,
            self.query,
            self.project,
            self.k,
            self.where.describe() if self.where else None,
            *extra,
        ]


def check_k(k: Any) -> int:
    return whole_number("k", k, 1, MAX_K)


def check_query(query: Any) -> str:
    if not isinstance(query, str) or not query.strip():
        raise ConfigError("the search query is empty: give a few words or an identifier")
    return query


def check_search(query: Any, table: str, k: Any) -> None:
    """The one check of a search's arguments, when its request is made: the query, the table
    (the store's own rule, `check_table_kind`) and `k`, in that order."""
    check_query(query)
    check_table_kind(table)
    check_k(k)
