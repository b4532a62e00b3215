"""The read-only project tools the rlm loop (and anyone else) may call, confined to one root.

This module owns five tools over one project — `search_code`, `search_docs` (the index's
hybrid search), `read_file` by line range, `list_dir` and `grep` — their JSON schemas as chat
tool specs, and the two rules that make them safe to hand to a model:

* every path is relative to the project root and must stay inside it. An absolute path, any
  `..` component, or a symbolic link whose target leaves the root is refused with a
  `PathRefused` that says so; the loop returns that message to the model and goes on;
* a tool reads only what the index would read: every file goes through the walker
  (`walker.read_one`, `walker.walk`) with the project's own selection, so gitignored,
  `.fathomignore`d and skipped files (`.env`, keys, the data dir, binaries) are refused to
  `read_file`, left out of `list_dir` and never searched by `grep`, key material in any other
  file is read redacted (`[REDACTED:<rule>]`), and no read takes more than the walker's size
  limit (a 1 GiB file is refused unread, not loaded).

It refuses to write, execute or fetch anything, to follow a link out of the root, and to
return unbounded output (every result is capped, and says when it was cut).

API:
    ProjectTools(root, *, search=None, max_chars=6000, max_read_lines=200, max_matches=50,
                 include=(), extra_ignores=())  (the project's selection: `Fathom.selection_of`)
    await tools.run(name, arguments) -> ToolOutcome       (never raises for a bad call)
    tools.resolve(path) -> Path                           (raises PathRefused / ToolError)
    find_spans(text) -> list[Span]                        (the path:start-end citations in a text)
    TOOL_SPECS: list[dict]                                (OpenAI-style function specs)
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from fathom.errors import FathomError
from fathom.index.walker import (
    IGNORE_FILES,
    MAX_FILE_BYTES,
    ReadRefused,
    Selection,
    Tree,
    Unreadable,
    read_one,
    walk,
)

# search(query, table, k) -> hits with .path .start_line .end_line .symbol .score .snippet
Search = Callable[[str, str, int], Awaitable[list[Any]]]


class ToolError(FathomError):
    """A tool call that cannot be served as asked (bad arguments, missing file). The loop
    hands the message to the model, which can correct itself."""


class PathRefused(ToolError):
    """A path that is absolute, climbs with `..`, or resolves (through a link) outside the
    project root. Nothing outside the root is ever read or listed."""

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(
            f"refused: path {path!r} {reason}; tools only read inside the project root, "
            f"use a path relative to it such as 'src/module.py'"
        )


@dataclass(frozen=True)
class Span:
    """A line range of one file, as cited: `path:start-end` (1-based, inclusive)."""

    path: str
    start_line: int
    end_line: int

    def __str__(self) -> str:
        if self.start_line == self.end_line:
            return f"{self.path}:{self.start_line}"
        return f"{self.path}:{self.start_line}-{self.end_line}"


@dataclass(frozen=True)
class ToolOutcome:
    text: str  # what the model reads
    summary: str  # one line for the trace
    ok: bool = True
    spans: tuple[Span, ...] = field(default=())  # line ranges this call showed the model


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


TOOL_SPECS: list[dict[str, Any]] = [
    _fn(
        "search_code",
        "Search the project's indexed source code by meaning and keywords.",
        {"query": {"type": "string"}, "k": {"type": "integer", "minimum": 1, "maximum": 20}},
        ["query"],
    ),
    _fn(
        "search_docs",
        "Search the project's indexed documentation (README, Markdown, docs).",
        {"query": {"type": "string"}, "k": {"type": "integer", "minimum": 1, "maximum": 20}},
        ["query"],
    ),
    _fn(
        "read_file",
        "Read lines of a file, numbered. Paths are relative to the project root.",
        {
            "path": {"type": "string"},
            "start_line": {"type": "integer", "minimum": 1},
            "end_line": {"type": "integer", "minimum": 1},
        },
        ["path"],
    ),
    _fn(
        "list_dir",
        "List a directory of the project (relative path; '.' is the root).",
        {"path": {"type": "string"}},
        [],
    ),
    _fn(
        "grep",
        "Search the project's text files for a regular expression; returns path:line: text.",
        {"pattern": {"type": "string"}, "path": {"type": "string"}, "ignore_case": {"type": "boolean"}},
        ["pattern"],
    ),
]


class ProjectTools:
    """The five read-only tools over the project at `root`.

    `search` is the index's search (table "code" or "docs"); without it the two search tools
    answer with a clear error and the others still work.
    """

    def __init__(
        self,
        root: str | Path,
        *,
        search: Search | None = None,
        max_chars: int = 6000,
        max_read_lines: int = 200,
        max_matches: int = 50,
        include: Sequence[str] = (),
        extra_ignores: Sequence[str] = (),
        max_file_bytes: int = MAX_FILE_BYTES,
    ):
        self.root = Path(root).resolve(strict=True)
        if not self.root.is_dir():
            raise ToolError(f"project root {self.root} is not a directory")
        # The index's own rules for this project, so a tool never shows what a walk leaves out.
        self.selection = Selection(self.root, include=include, extra_ignores=extra_ignores)
        self.max_file_bytes = max_file_bytes
        self.search = search
        self.max_chars = max_chars
        self.max_read_lines = max_read_lines
        self.max_matches = max_matches
        self._files: list[Any] | None = None  # the walk, taken once per loop (files hold still)

    # -- confinement -------------------------------------------------------------------

    def resolve(self, path: Any) -> Path:
        """The real path of `path` inside the root, or `PathRefused`.

        Checked twice on purpose: lexically first (absolute, drive letters, `..`), so a
        traversal is refused even when its target does not exist, then after resolving every
        link, so a symlink inside the project cannot lead outside it."""
        if not isinstance(path, str):
            raise ToolError(f"path must be a string, got {type(path).__name__}")
        raw = path.strip() or "."
        if "\x00" in raw:
            raise PathRefused(raw, "contains a NUL byte")
        if raw.startswith(("/", "\\", "~")) or PureWindowsPath(raw).drive or PurePosixPath(raw).is_absolute():
            raise PathRefused(raw, "is absolute")
        parts = re.split(r"[\\/]+", raw)
        if ".." in parts:
            raise PathRefused(raw, "climbs out with '..'")
        try:
            real = (self.root / raw).resolve(strict=False)
        except OSError as exc:  # a link swapped for a folder while it was read (EINVAL), a loop
            raise ToolError(
                f"path {raw!r} cannot be resolved ({exc.strerror}): it is a link "
                f"loop or changed while it was read"
            ) from None
        if not real.is_relative_to(self.root):
            raise PathRefused(raw, "leads outside the project root through a symbolic link")
        return real

    def rel(self, real: Path) -> str:
        return real.relative_to(self.root).as_posix() or "."

    def read(self, real: Path) -> list[str]:
        """The lines of the file at `real` (inside the root), read as a walk reads it, or
        `ToolError` naming why a walk would leave it out."""
        try:
            source = read_one(
                self.root, self.rel(real), selection=self.selection, max_file_bytes=self.max_file_bytes
            )
        except ReadRefused as exc:
            raise ToolError(f"refused: {exc}") from None
        return source.text.splitlines()

    def folder(self, path: Any) -> Path:
        """The real path of a folder a walk would enter, or `ToolError`."""
        real = self.resolve(path)
        rel = self.rel(real)
        if not real.is_dir():
            raise ToolError(f"no directory {path!r} in the project")
        if rel != "." and not self.selection.admits(rel, is_dir=True):
            raise ToolError(
                f"refused: {rel}/ is a folder the index leaves out (ignored, "
                f"excluded or skipped); search the index instead"
            )
        return real

    # -- dispatch ----------------------------------------------------------------------

    async def run(self, name: str, arguments: dict[str, Any]) -> ToolOutcome:
        """Run one tool call; a bad call comes back as an error outcome, never an exception,
        because the model must see the refusal and carry on."""
        handlers: dict[str, Callable[..., Awaitable[ToolOutcome]]] = {
            "search_code": self._search_code,
            "search_docs": self._search_docs,
            "read_file": self._read_file,
            "list_dir": self._list_dir,
            "grep": self._grep,
        }
        handler = handlers.get(name)
        if handler is None:
            known = ", ".join(sorted(handlers))
            return _error(f"unknown tool {name!r}; the tools are {known}")
        if not isinstance(arguments, dict):
            return _error(f"{name}: arguments must be a JSON object")
        try:
            return await handler(**arguments)
        except TypeError as exc:
            return _error(f"{name}: bad arguments ({exc}); see the tool's schema")
        except ToolError as exc:
            return _error(str(exc))
        except FathomError as exc:  # e.g. the index refused a search: the model may try another way
            return _error(f"{name} failed: {exc}")

    # -- the tools ---------------------------------------------------------------------

    async def _search(self, table: str, query: Any, k: Any = 5) -> ToolOutcome:
        if self.search is None:
            raise ToolError(f"search_{table} is unavailable: this project is not indexed")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("search needs a non-empty query string")
        k = _int(k, "k", 1, 20)
        hits = await self.search(query, table, k)
        if not hits:
            return ToolOutcome(f"no {table} results for {query!r}", f"0 {table} hits")
        lines, spans = [], []
        for i, h in enumerate(hits, 1):
            span = Span(h.path, int(h.start_line), int(h.end_line))
            spans.append(span)
            label = f" ({h.symbol})" if getattr(h, "symbol", None) else ""
            lines.append(f"[{i}] {span}{label} score={float(h.score):.4f}\n{h.snippet}")
        text = self._cap("\n\n".join(lines))
        return ToolOutcome(
            text, f"{len(hits)} {table} hits: " + ", ".join(map(str, spans[:5])), spans=tuple(spans)
        )

    async def _search_code(self, query: Any = None, k: Any = 5) -> ToolOutcome:
        return await self._search("code", query, k)

    async def _search_docs(self, query: Any = None, k: Any = 5) -> ToolOutcome:
        return await self._search("docs", query, k)

    async def _read_file(self, path: Any = None, start_line: Any = 1, end_line: Any = None) -> ToolOutcome:
        real = self.resolve(path)
        if not real.is_file():
            raise ToolError(f"no file {path!r} in the project; use list_dir to see what exists")
        lines = await asyncio.to_thread(self.read, real)
        total = len(lines)
        start = _int(start_line, "start_line", 1, None)
        if total == 0:
            return ToolOutcome(f"{self.rel(real)} is empty", f"{self.rel(real)}: empty")
        if start > total:
            raise ToolError(f"{path!r} has {total} lines; start_line {start} is past its end")
        end = total if end_line is None else _int(end_line, "end_line", start, None)
        end = min(end, total, start + self.max_read_lines - 1)
        body = "\n".join(f"{n:>5}  {lines[n - 1]}" for n in range(start, end + 1))
        rel = self.rel(real)
        more = f"\n[lines {end + 1}-{total} not shown]" if end < total else ""
        span = Span(rel, start, end)
        return ToolOutcome(
            self._cap(f"{span} (of {total} lines)\n{body}{more}"), f"read {span}", spans=(span,)
        )

    async def _list_dir(self, path: Any = ".") -> ToolOutcome:
        real = self.folder(path)
        entries = await asyncio.to_thread(self._entries, real)
        rel = self.rel(real)
        text = self._cap(f"{rel}/\n" + "\n".join(entries) if entries else f"{rel}/ is empty")
        return ToolOutcome(text, f"listed {rel} ({len(entries)} entries)")

    def _entries(self, real: Path) -> list[str]:
        out = []
        base = self.rel(real)
        # Listed through the walker's descriptors, as a walk lists it: a folder swapped for a
        # link after `folder` resolved it is refused, never listed from outside the root.
        with Tree(self.root) as tree:
            try:
                listed = sorted(
                    os.scandir(tree.folder([] if base == "." else base.split("/"))), key=lambda e: e.name
                )
            except (Unreadable, OSError):
                raise ToolError(
                    f"refused: {base}/ cannot be listed (it is reached through a "
                    f"symbolic link now, or unreadable)"
                ) from None
            for entry in listed:
                rel = entry.name if base == "." else f"{base}/{entry.name}"
                if entry.name in IGNORE_FILES or not self.selection.admits(
                    rel, is_dir=entry.is_dir(follow_symlinks=False)
                ):
                    continue  # what a walk leaves out is not shown: not even its name
                if entry.is_symlink():
                    target = (real / entry.name).resolve(strict=False)
                    inside = target.is_relative_to(self.root)
                    out.append(
                        f"{entry.name} -> {'(inside)' if inside else '(outside the project: refused)'}"
                    )
                elif entry.is_dir():
                    out.append(entry.name + "/")
                else:
                    out.append(entry.name)
        return out

    async def _grep(self, pattern: Any = None, path: Any = ".", ignore_case: Any = False) -> ToolOutcome:
        if not isinstance(pattern, str) or not pattern:
            raise ToolError("grep needs a non-empty pattern")
        try:
            regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            raise ToolError(f"grep pattern {pattern!r} is not a valid regular expression: {exc}") from None
        real = self.resolve(path)
        base = self.rel(self.folder(path) if real.is_dir() else real)
        matches, spans = await asyncio.to_thread(self._grep_files, regex, base)
        if not matches:
            return ToolOutcome(f"no match for /{pattern}/ under {base}", f"grep /{pattern}/: 0 matches")
        cut = len(matches) > self.max_matches
        shown = matches[: self.max_matches]
        text = "\n".join(shown) + (
            f"\n[more than {self.max_matches} matches; narrow the pattern]" if cut else ""
        )
        return ToolOutcome(
            self._cap(text),
            f"grep /{pattern}/: {len(shown)}{'+' if cut else ''} matches",
            spans=tuple(spans[: self.max_matches]),
        )

    def _grep_files(self, regex: re.Pattern[str], base: str) -> tuple[list[str], list[Span]]:
        if self._files is None:
            # The walker's rules, with the project's selection: .gitignore, .fathomignore,
            # no vendored trees, no binaries, no symlinks, nothing over the size limit.
            self._files = list(walk(self.root, selection=self.selection, max_file_bytes=self.max_file_bytes))
        prefix = "" if base == "." else base.rstrip("/") + "/"
        matches, spans = [], []
        for f in self._files:
            if prefix and not (f.path + "/").startswith(prefix) and f.path != base:
                continue
            for n, line in enumerate(f.text.splitlines(), 1):
                if regex.search(line):
                    matches.append(f"{f.path}:{n}: {line.strip()[:200]}")
                    spans.append(Span(f.path, n, n))
                    if len(matches) > self.max_matches:
                        return matches, spans
        return matches, spans

    def _cap(self, text: str) -> str:
        if len(text) <= self.max_chars:
            return text
        return text[: self.max_chars] + f"\n[output cut at {self.max_chars} characters]"

    # -- citations ---------------------------------------------------------------------

    def check_span(self, span: Span) -> str | None:
        """None if `span` names lines that exist in a file inside the root, else why not."""
        try:
            real = self.resolve(span.path)
        except ToolError as exc:
            return str(exc)
        if not real.is_file():
            return f"{span.path} is not a file in the project"
        try:
            total = len(self.read(real))
        except ToolError as exc:
            return str(exc)
        if not 1 <= span.start_line <= span.end_line <= max(total, 1):
            return f"{span} is outside {span.path} (1-{total})"
        return None


# `path:12` or `path:12-30` (also with an en dash); a path needs a dot or a slash so that
# "step:3" or "http:80" in prose is not taken for a citation.
_SPAN_RE = re.compile(
    r"(?<![\w/.-])(?P<path>(?:\./)?[\w.-]*[\w-](?:/[\w.-]+)*(?:\.[\w]+|/[\w.-]+))"
    r":(?P<start>\d+)(?:\s*[-\u2013]\s*(?P<end>\d+))?"
)


def find_spans(text: str) -> list[Span]:
    """Every `path:start-end` (or `path:line`) cited in `text`, in order, without repeats."""
    out: list[Span] = []
    for m in _SPAN_RE.finditer(text or ""):
        path = m.group("path").removeprefix("./")
        start = int(m.group("start"))
        end = int(m.group("end") or start)
        span = Span(path, min(start, end), max(start, end))
        if span not in out:
            out.append(span)
    return out


def _int(value: Any, name: str, low: int, high: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ToolError(f"{name} must be a whole number, got {value!r}")
    number = int(value)
    if number < low or (high is not None and number > high):
        bound = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise ToolError(f"{name} must be {bound}, got {number}")
    return number


def _error(message: str) -> ToolOutcome:
    return ToolOutcome(f"error: {message}", message.splitlines()[0][:200], ok=False)
