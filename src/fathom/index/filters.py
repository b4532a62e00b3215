"""Search filters: which chunks a search may return, by language, path glob and symbol kind.

What this module owns: the one definition of a filter (`SearchFilter`), its validation (a
typed `ConfigError` naming the bad field and the accepted values, before any query runs), and
its translations for the backends: a SQL predicate for LanceDB (`lance_sql`), a row mask for
an in-memory matrix (`mask`), and the path glob as a regular expression (`path_regex`) that
Python's `re`, DataFusion (Rust `regex`) and PostgreSQL's `~` read alike.

Filters are applied inside the store, before the top k is cut, so a filtered search returns
the best k chunks that pass the filter, never the filtered remains of an unfiltered top k.

Path globs: `*` matches within one folder, `**` across folders, `?` one character, `[abc]` a
class. A glob without `/` matches a file name at any depth (`*.py`, `test_*`); one with `/` is
anchored at the project root (`src/**/*.go`); a trailing `/` means everything under a folder
(`docs/`).

What it refuses to do: query anything itself, or accept a language or kind no chunk can have
(the search would silently find nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fathom.errors import ConfigError
from fathom.index.chunking import LANGUAGES, SYMBOL_KINDS

MAX_GLOB = 500
_REGEX_SPECIAL = set(".^$*+?()[]{}|\\")


def glob_regex(glob: str) -> str:
    """An anchored regular expression for a path glob (see the module docstring)."""
    pattern = glob.strip().replace("\\", "/").removeprefix("./")
    if pattern.endswith("/"):
        pattern += "**"
    anchored = "/" in pattern.rstrip("/")
    pattern = pattern.lstrip("/")
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                i += 2
                if pattern.startswith("/", i):
                    i += 1
                    out.append("(.*/)?")  # `a/**/b` matches a/b too
                else:
                    out.append(".*")
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and pattern.find("]", i + 2) > 0:
            end = pattern.find("]", i + 2)  # a class holds at least one character
            body = pattern[i + 1 : end]
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            body = "".join("\\" + ch if ch in "\\[]^" else ch for ch in body)
            out.append(("[^" if negate else "[") + body + "]")
            i = end
        elif c in _REGEX_SPECIAL:
            out.append("\\" + c)
        else:
            out.append(c)
        i += 1
    body = "".join(out)
    return f"^{body}$" if anchored else f"^(.*/)?{body}$"


@dataclass(frozen=True)
class SearchFilter:
    """Restrict a search to chunks of one `language`, under a `path` glob, of one symbol
    `kind` ("function", "method", "class"); None leaves that field open."""

    language: str | None = None
    path: str | None = None
    kind: str | None = None

    @classmethod
    def of(cls, language: Any = None, path: Any = None, kind: Any = None) -> SearchFilter | None:
        """A validated filter, or None when nothing is restricted."""
        problems = []
        if language is not None and (not isinstance(language, str) or language not in LANGUAGES):
            known = ", ".join(sorted(lang for lang in LANGUAGES if lang in _COMMON)) + ", …"
            problems.append(
                f"language {language!r} is not a language Fathom indexes (e.g. "
                f"{known}: lower case, as `index_status` and the results name them)"
            )
        if path is not None and (not isinstance(path, str) or not path.strip() or len(path) > MAX_GLOB):
            problems.append(f"path must be a glob of 1-{MAX_GLOB} characters such as `src/**` or `*.py`")
        if kind is not None and kind not in SYMBOL_KINDS:
            problems.append(f"kind {kind!r} is not a symbol kind: use one of {', '.join(SYMBOL_KINDS)}")
        if problems:
            raise ConfigError("invalid search filter: " + "; ".join(problems), problems)
        if language is None and path is None and kind is None:
            return None
        return cls(language, path.strip() if path else None, kind)

    @property
    def path_regex(self) -> str | None:
        return glob_regex(self.path) if self.path else None

    def lance_sql(self) -> str:
        """The predicate for LanceDB's `where(…, prefilter=True)`."""
        parts = []
        if self.language is not None:
            parts.append(f"language = {_sql_str(self.language)}")
        if self.kind is not None:
            parts.append(f"kind = {_sql_str(self.kind)}")
        if self.path is not None:
            parts.append(f"regexp_like(path, {_sql_str(self.path_regex or '')})")
        return " AND ".join(parts) or "TRUE"

    def mask(self, languages: list[str], paths: list[str], kinds: list[str | None]) -> np.ndarray:
        """Which rows of an in-memory table pass, as a boolean array."""
        import re

        keep = np.ones(len(paths), dtype=bool)
        if self.language is not None:
            keep &= np.fromiter((lang == self.language for lang in languages), bool, len(paths))
        if self.kind is not None:
            keep &= np.fromiter((k == self.kind for k in kinds), bool, len(paths))
        if self.path is not None:
            rx = re.compile(self.path_regex or "")
            seen: dict[str, bool] = {}
            keep &= np.fromiter(
                (seen.setdefault(p, rx.match(p) is not None) if p not in seen else seen[p] for p in paths),
                bool,
                len(paths),
            )
        return keep

    def describe(self) -> str:
        return ", ".join(
            f"{k} {v}"
            for k, v in (("language", self.language), ("path", self.path), ("kind", self.kind))
            if v is not None
        )


_COMMON = frozenset(
    {"python", "javascript", "typescript", "go", "rust", "java", "c", "cpp", "markdown", "rst", "text"}
)


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
