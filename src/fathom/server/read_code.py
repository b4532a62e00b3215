"""`read_code` and the `fathom://` resources: the lines of a file as the index holds them.

What it owns: reading a range of a file (by project and path, or by a search hit's `id`) from
the indexed version (`fathom.index.reading`), saying whether the file on disk changed since,
holding the answer to `max_tokens` (the lines that fit, and where to go on), and the same
lines as a resource (`resources/read` on `fathom://PROJECT/PATH?lines=A-B`, the URI every
search hit links to).

Who may read what is decided where every other read is: the store it reads through is the
caller's scoped view (`fathom.scope`), so a token scoped to one project gets "no such project"
for any other, by path, by id or by URI alike; and the file on disk is compared through the
walker's one rule (`walker.read_one`), so a file a walk leaves out (a credential file, an
ignored path) is refused even when the index still holds it. Key material is not here to serve:
the index holds every file as the walker read it, its secrets redacted (`[REDACTED:<rule>]`
on the lines they held), and the disk is compared through that same redacting read.

It refuses to read a file the index does not hold (nothing outside the index is served), to
cut a line in half, and to import the MCP tool module (the tools register what it defines).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from fathom.errors import ConfigError
from fathom.index.reading import IndexedFile, chunk_by_id, disk_state, indexed_file
from fathom.index.walker import resolve_roots, root_moved
from fathom.server.answer_tokens import DEFAULT_MAX_TOKENS, ENVELOPE, tokens_of
from fathom.server.search_answer import parse_hit_id, resource_uri

if TYPE_CHECKING:
    from fathom.service.ports import CodeReader, Configured

OnDisk = Literal["unchanged", "changed", "deleted", "unknown"]
ON_DISK = (
    "the file on disk now against the indexed version these lines come from: "
    "`unchanged`, `changed` (edited since it was indexed: the live sync catches up "
    "within seconds, or run index_project), `deleted`, or `unknown` (the project "
    "folder is not reachable from the server)"
)
LONG_LINE = "[a line longer than a chunk, indexed in pieces: not shown]"


class CodeRead(BaseModel):
    """What `read_code` answers besides the lines themselves (those are its text block,
    numbered)."""

    project: str
    path: str = Field(description="file path relative to the project root")
    language: str
    start_line: int = Field(description="first line shown, 1-based")
    end_line: int = Field(description="last line shown, inclusive")
    last_line: int = Field(description="the file's last line as indexed")
    on_disk: OnDisk = Field(description=ON_DISK)
    next_start_line: int | None = Field(
        default=None,
        description="the lines asked for did not fit max_tokens: read on from this line; null: all shown",
    )
    uri: str = Field(description="the resource URI of the lines shown")
    tokens: int = Field(description="tokens of the answer, as max_tokens counts them")
    note: str | None = None


@dataclass(frozen=True)
class Lines:
    """The answer: its metadata and the lines, line `read.start_line + i` being `lines[i]`."""

    read: CodeRead
    lines: list[str]

    def numbered(self) -> str:
        width = len(str(self.read.end_line))
        head = (
            f"{self.read.project}:{self.read.path}:{self.read.start_line}-"
            f"{self.read.end_line} of {self.read.last_line} (as indexed; "
            f"{self.read.on_disk} on disk)"
        )
        body = [f"{n:>{width}}\t{line}" for n, line in enumerate(self.lines, start=self.read.start_line)]
        tail = (
            [
                f"… more from line {self.read.next_start_line} (read_code start_line="
                f"{self.read.next_start_line})"
            ]
            if self.read.next_start_line
            else []
        )
        return "\n".join([head, *body, *tail])


def _target(
    project: str | None, path: str | None, start: int | None, end: int | None, hit: str | None
) -> tuple[str, str, str | None, str | None, int | None, int | None]:
    """(project, path or None, table, chunk id, start, end) from the arguments as given."""
    if hit is not None:
        if path is not None or start is not None or end is not None:
            raise ConfigError(
                "give either `id` (a search hit's id) or `project` and `path` "
                "with an optional line range, not both"
            )
        named, table, chunk = parse_hit_id(hit)
        if project is not None and project != named:
            raise ConfigError(f"the id {hit!r} is a hit of project {named!r}, not {project!r}")
        return named, "", table, chunk, None, None
    if not project or not path:
        raise ConfigError(
            "read_code needs `project` and `path` (as a search result gives them), or a search hit's `id`"
        )
    return project, path, None, None, start, end


def _on_disk(fathom: CodeReader, indexed: IndexedFile) -> tuple[OnDisk, str | None]:
    record = fathom.records.get(indexed.project) or {}
    root = Path(record["root"]) if record.get("root") else None
    if root is None:
        return "unknown", "the project's folder is not recorded"
    problem = root_moved(root, resolve_roots(fathom.settings.index_root_list()))
    if problem is not None:
        return "unknown", f"the project folder is not read: {problem}"
    state = disk_state(indexed, root, fathom.selection_of(indexed.project, root))
    return state, None  # type: ignore[return-value]


def _locate(
    fathom: CodeReader,
    project: str | None,
    path: str | None,
    start: int | None,
    end: int | None,
    hit: str | None,
) -> tuple[IndexedFile, int, int]:
    project, path, table, chunk_id, start, end = _target(project, path, start, end, hit)
    store = fathom.store  # the caller's scoped view: another project is "no such project"
    if chunk_id is not None and table is not None:
        chunk = chunk_by_id(store, project, table, chunk_id)
        if chunk is None:
            raise ConfigError(
                f"no chunk {hit!r} in the index: its lines changed since the "
                f"search (an edit makes a new chunk); search again"
            )
        path, start, end = chunk.path, chunk.start_line, chunk.end_line
    indexed = indexed_file(store, project, path or "")
    if indexed is None:
        raise ConfigError(
            f"no indexed file {path!r} in project {project!r}: give the path "
            f"relative to the project root, as search results give it"
        )
    first, last = indexed.span(start, end)
    return indexed, first, last


def read_lines(
    fathom: CodeReader,
    *,
    project: str | None = None,
    path: str | None = None,
    start_line: int | None = None,
    end_line: int | None = None,
    hit: str | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
) -> Lines:
    """The lines asked for, as indexed, held to `max_tokens` (blocking: run it in a thread)."""
    indexed, first, last = _locate(fathom, project, path, start_line, end_line, hit)
    on_disk, note = _on_disk(fathom, indexed)
    shown = [LONG_LINE if line is None else line for line in indexed.lines[first - 1 : last]]
    if any(line is None for line in indexed.lines[first - 1 : last]):
        note = (note + "; " if note else "") + LONG_LINE
    read = CodeRead(
        project=indexed.project,
        path=indexed.path,
        language=indexed.language,
        start_line=first,
        end_line=last,
        last_line=indexed.last_line,
        on_disk=on_disk,
        uri=resource_uri(indexed.project, indexed.path, first, last),
        tokens=0,
        note=note,
    )
    return fit(fathom, Lines(read, shown), max_tokens)


def fit(fathom: Configured, answer: Lines, max_tokens: int) -> Lines:
    """The answer with as many of its lines as `max_tokens` holds (at least one), counting
    the numbered text and the metadata, as a client receives both."""
    tokens = tokens_of(fathom)
    width = len(str(answer.read.end_line))
    # Each line as the wire carries it: inside a JSON string, every non-ASCII character
    # escaped (as the SDK sends it).
    per_line = tokens.count(
        [
            json.dumps(f"{n:>{width}}\t{line}")
            for n, line in enumerate(answer.lines, start=answer.read.start_line)
        ]
    )
    # The metadata (structured), the head and tail lines of the text block, the envelope.
    fixed = tokens.total(answer.read.model_dump_json()) * 2 + ENVELOPE
    keep, used = 0, fixed
    for cost in per_line:
        if keep and used + cost + 1 > max_tokens:
            break
        keep, used = keep + 1, used + cost + 1
    read = answer.read
    if keep < len(answer.lines):
        end = read.start_line + keep - 1
        read = read.model_copy(
            update={
                "end_line": end,
                "next_start_line": end + 1,
                "uri": resource_uri(read.project, read.path, read.start_line, end),
            }
        )
    return Lines(read.model_copy(update={"tokens": used}), answer.lines[:keep])


def parse_lines(value: str | None) -> tuple[int | None, int | None]:
    """`10-40`, `10` or nothing, as a resource URI's `lines` gives a range."""
    if not value:
        return None, None
    first, _, last = value.partition("-")
    try:
        start = int(first)
        end = int(last) if last else start
    except ValueError:
        raise ConfigError(f"lines={value!r} is not a line range: write lines=10-40 or lines=10") from None
    if start < 1 or end < start:
        raise ConfigError(f"lines={value!r}: a range runs from line 1 up, start before end")
    return start, end


async def read_resource(fathom: CodeReader, project: str, path: str, lines: str | None) -> str:
    """The exact text of a `fathom://` resource: the lines, unnumbered, as indexed; a range
    over the default budget is refused, naming one that fits (a resource has no cursor)."""
    start, end = parse_lines(lines)
    answer = await asyncio.to_thread(
        read_lines, fathom, project=project, path=path, start_line=start, end_line=end
    )
    if answer.read.next_start_line is not None:
        asked = f"{start}-{end}" if start is not None else "the whole file"
        raise ConfigError(
            f"{path}: {asked} is more than {DEFAULT_MAX_TOKENS} tokens; read "
            f"it in parts, e.g. ?lines={answer.read.start_line}-"
            f"{answer.read.end_line}"
        )
    return "\n".join(answer.lines)
