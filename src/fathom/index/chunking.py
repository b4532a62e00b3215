"""Chunking: cuts one file's text into `Chunk`s for the code and docs tables.

Owns: language detection from a path, syntax-aware chunking of code with tree-sitter (the
official per-language grammar wheels, which ship compiled grammars and work offline), heading-
aware chunking of docs (Markdown, reStructuredText, plain text), and line windows for every
other text file. Line numbers are 1-based and inclusive; `\\n`, `\\r\\n` and a lone `\\r` all end
a line (`source_lines` is the one definition, shared with whoever maps a file line back to a
chunk).

Refuses: to read files (the walker does that), to embed or decorate chunk text (a chunk's
`text` is always the raw slice of its lines; the indexer may add context when it embeds), and
to raise on any input: a file tree-sitter cannot parse still gets line windows, so nothing of
a file goes unindexed.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import PurePosixPath
from typing import Protocol

from fathom.index.chunk import Chunk

log = logging.getLogger(__name__)

CODE = "code"
DOCS = "docs"

# A chunk should fit an encoder's context window: MiniLM reads 256 word pieces, which is
# roughly 1000-1500 characters of code. Bigger units are cut into overlapping windows; with a
# `TokenCounter` (the encoder's own tokenizer) every chunk is then held to its token limit.
MAX_CHARS = 1500
MAX_LINES = 60
OVERLAP_LINES = 5
# Line windows for files without a grammar or headings.
WINDOW_LINES = 40
# A fragment with fewer non-blank characters than this ("}", "end", one import) says too
# little to be worth its own vector, so it joins a neighbour when the result still fits.
TINY_CHARS = 40
# Nesting deeper than this is treated as one opaque unit: recursion must stay bounded on
# adversarial input.
MAX_DEPTH = 24

# --- languages -------------------------------------------------------------------------

_EXTENSIONS: dict[str, str] = {
    ".py": "python", ".pyi": "python", ".pyw": "python",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".mts": "typescript", ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".c": "c", ".h": "c",
    ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".c++": "cpp",
    ".hh": "cpp", ".hpp": "cpp", ".hxx": "cpp", ".h++": "cpp", ".ipp": "cpp", ".tpp": "cpp",
    # Docs.
    ".md": "markdown", ".markdown": "markdown", ".mdx": "markdown",
    ".rst": "rst", ".rest": "rst",
    ".txt": "text", ".text": "text",
    # Code and config without a grammar here: line windows, code table.
    ".sh": "shell", ".bash": "shell", ".zsh": "shell", ".fish": "shell",
    ".ps1": "powershell", ".bat": "batch", ".cmd": "batch",
    ".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".json": "json", ".jsonc": "json",
    ".ini": "ini", ".cfg": "ini", ".conf": "ini", ".properties": "properties", ".env": "dotenv",
    ".xml": "xml", ".html": "html", ".htm": "html", ".css": "css", ".scss": "scss",
    ".sass": "sass", ".less": "less", ".vue": "vue", ".svelte": "svelte",
    ".rb": "ruby", ".php": "php", ".pl": "perl", ".pm": "perl", ".lua": "lua", ".r": "r",
    ".kt": "kotlin", ".kts": "kotlin", ".swift": "swift", ".cs": "csharp", ".fs": "fsharp",
    ".scala": "scala", ".clj": "clojure", ".ex": "elixir", ".exs": "elixir", ".erl": "erlang",
    ".hs": "haskell", ".ml": "ocaml", ".dart": "dart", ".zig": "zig", ".nim": "nim",
    ".m": "objc", ".mm": "objcpp", ".jl": "julia", ".sql": "sql", ".proto": "protobuf",
    ".graphql": "graphql", ".gql": "graphql", ".tf": "terraform", ".hcl": "hcl",
    ".cmake": "cmake", ".mk": "make", ".gradle": "gradle", ".pyx": "cython", ".pxd": "cython",
    ".ipynb": "json", ".tex": "latex", ".vim": "vim", ".el": "elisp",
}
_FILENAMES: dict[str, str] = {
    "makefile": "make", "gnumakefile": "make", "dockerfile": "dockerfile",
    "containerfile": "dockerfile", "cmakelists.txt": "cmake", "jenkinsfile": "groovy",
    "rakefile": "ruby", "gemfile": "ruby", "justfile": "make", "vagrantfile": "ruby",
}
# Extension-less prose files that belong to the docs table.
_DOC_STEMS = frozenset({
    "readme", "changelog", "changes", "history", "news", "authors", "contributors",
    "contributing", "install", "license", "licence", "copying", "notice", "todo", "faq",
    "security", "code_of_conduct", "governance", "maintainers", "thanks", "usage",
})
DOC_LANGUAGES = frozenset({"markdown", "rst"})
# Every language name a chunk can carry (what the searches' language filter accepts).
LANGUAGES = frozenset(_EXTENSIONS.values()) | frozenset(_FILENAMES.values()) | {"text"}


def detect_language(path: str | PurePosixPath) -> tuple[str, str]:
    """(language, table) for a path: e.g. ("python", "code"), ("markdown", "docs").

    Unknown extensions are ("text", "code"): indexed as line windows. `.txt` files and
    extension-less prose (README, CHANGELOG, ...) are ("text", "docs").
    """
    name = PurePosixPath(str(path).replace("\\", "/")).name
    lower = name.lower()
    if lower in _FILENAMES:
        return _FILENAMES[lower], CODE
    suffix = PurePosixPath(lower).suffix
    stem = lower[: -len(suffix)] if suffix else lower
    if suffix in _EXTENSIONS:
        language = _EXTENSIONS[suffix]
        if language in DOC_LANGUAGES or language == "text":
            return language, DOCS
        return language, CODE
    if stem in _DOC_STEMS or lower.split(".", 1)[0] in _DOC_STEMS:
        return "text", DOCS
    return "text", CODE


def source_lines(text: str) -> list[str]:
    """The file's lines as every chunk numbers them (line n is `source_lines(text)[n-1]`)."""
    text = _normalize(text)
    if not text:
        return []
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return lines


def _normalize(text: str) -> str:
    # One definition of a line end for tree-sitter rows, windows and callers alike.
    return text.replace("\r\n", "\n").replace("\r", "\n")


# --- entry point -----------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """Size bounds of one chunk; a unit over either bound is cut into windows."""

    max_chars: int = MAX_CHARS
    max_lines: int = MAX_LINES
    overlap: int = OVERLAP_LINES
    window_lines: int = WINDOW_LINES

    def __post_init__(self) -> None:
        # Bounds this small would make windows that never advance or never fit a line.
        object.__setattr__(self, "max_chars", max(self.max_chars, 80))
        object.__setattr__(self, "max_lines", max(self.max_lines, 4))
        object.__setattr__(self, "window_lines", max(min(self.window_lines, self.max_lines), 2))
        object.__setattr__(self, "overlap", max(0, min(self.overlap, self.window_lines // 2)))


class TokenCounter(Protocol):
    """An encoder's tokenizer, as chunking needs it. `limit` is the longest input the encoder
    reads, special tokens included; `key` names tokenizer and limit (chunks cached under one
    key are valid for that key only)."""

    limit: int
    key: str

    def count(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text as the encoder reads it, special tokens included (one batch)."""
        ...

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """The (start, end) characters of each token of `text`, special tokens left out."""
        ...


class EstimatedTokens:
    """A `TokenCounter` for an encoder whose tokenizer is not in this process (a sidecar's or a
    cloud model, which declares only its limit): one token per `CHARS` characters, fewer than
    any tokenizer measured here gives code (2.8 for MiniLM's on Python), so a chunk it passes
    fits, at the price of chunks shorter than need be."""

    CHARS = 2

    def __init__(self, limit: int, *, key: str):
        self.limit, self.key = int(limit), f"estimate:{key}@{limit}"

    def count(self, texts: Sequence[str]) -> list[int]:
        return [-(-len(t) // self.CHARS) for t in texts]

    def offsets(self, text: str) -> list[tuple[int, int]]:
        return [(at, min(at + self.CHARS, len(text))) for at in range(0, len(text), self.CHARS)]


def chunk_file(
    path: str, text: str, language: str | None = None, *, limits: Limits | None = None
) -> list[Chunk]:
    """Cut one file into chunks, in line order (docs chunks of a code file come last).

    `path` is the project-relative POSIX path, stored on every chunk. `language` overrides
    detection from the path. Sizes are in characters and lines; `fit_tokens` then holds the
    chunks to an encoder's token limit. Never raises: unparseable code falls back to line
    windows.
    """
    limits = limits or Limits()
    detected, detected_table = detect_language(path)
    language = language or detected
    if language in DOC_LANGUAGES or (language == "text" and language == detected and detected_table == DOCS):
        table = DOCS
    else:
        table = CODE
    lines = source_lines(text)
    if not any(line.strip() for line in lines):
        return []
    doc = _Doc(path=path, language=language, table=table, lines=lines, limits=limits)
    try:
        if table == DOCS:
            return doc.emit(_doc_sections(lines, language))
        spec = _SPECS.get(language)
        if spec is None:
            return doc.windows_of_file()
        return _chunk_code(doc, spec)
    except Exception:  # noqa: BLE001 - the contract is "never raise"; windows index everything
        log.warning("chunking %s as %s failed; indexing it as line windows", path, language, exc_info=True)
        return doc.windows_of_file()


def fit_tokens(chunks: list[Chunk], tokens: TokenCounter) -> tuple[list[Chunk], int]:
    """The chunks with each one over `tokens.limit` cut at line boundaries (a single line too
    long, at token boundaries inside it), and how many had to be cut. Sizing in characters is
    only a guess at tokens: a chunk of dense code can hold twice the tokens of prose, and an
    encoder silently drops what is past its limit.

    Tokenizing is batched: one call counts every chunk of the file, one every line of the
    chunks that are over, one every run of lines proposed; only a run the tokenizer reads
    longer than its lines add up to (rare) is counted again on its own."""
    counts = tokens.count([c.text for c in chunks] + [""])
    special = counts.pop()
    over = [i for i, n in enumerate(counts) if n > tokens.limit]
    if not over:
        return chunks, 0
    lines = {i: chunks[i].text.split("\n") for i in over}
    flat = tokens.count([line for i in over for line in lines[i]])
    budget = tokens.limit - special
    runs: dict[int, list[tuple[int, int]]] = {}
    at = 0
    for i in over:
        sizes = [n - special for n in flat[at : at + len(lines[i])]]
        at += len(lines[i])
        runs[i] = _runs_of_lines(lines[i], sizes, budget)
    proposed = [(i, a, b) for i in over for a, b in runs[i] if b >= a]
    checked = tokens.count(["\n".join(lines[i][a : b + 1]) for i, a, b in proposed])
    fits = {(i, a, b) for (i, a, b), n in zip(proposed, checked) if n <= tokens.limit}
    by_chunk = set(over)
    out: list[Chunk] = []
    for i, chunk in enumerate(chunks):
        if i not in by_chunk:
            out.append(chunk)
            continue
        for a, b in runs[i]:
            if b < a:  # one line over the limit on its own: sliced by the tokenizer's offsets
                out.extend(_slices(chunk, a, lines[i][a], tokens))
            elif (i, a, b) in fits:
                out.append(_lines_chunk(chunk, lines[i], a, b))
            else:
                out.extend(_shrink(chunk, lines[i], a, b, tokens))
    return out, len(over)


def _runs_of_lines(lines: list[str], sizes: list[int], budget: int) -> list[tuple[int, int]]:
    """Greedy runs of whole lines whose summed sizes fit `budget`, blank lines trimmed at the
    ends; (row, row - 1) marks one line too long for any run."""
    runs: list[tuple[int, int]] = []
    row = 0
    while row < len(lines):
        if not lines[row].strip():
            row += 1
            continue
        if sizes[row] > budget:
            runs.append((row, row - 1))
            row += 1
            continue
        last, size = row, sizes[row]
        while last + 1 < len(lines) and size + sizes[last + 1] <= budget:
            last += 1
            size += sizes[last]
        end = last
        while end > row and not lines[end].strip():
            end -= 1
        runs.append((row, end))
        row = last + 1
    return runs


def _lines_chunk(chunk: Chunk, lines: list[str], a: int, b: int) -> Chunk:
    return replace(chunk, start_line=chunk.start_line + a, end_line=chunk.start_line + b,
                   text="\n".join(lines[a : b + 1]))


def _shrink(chunk: Chunk, lines: list[str], a: int, b: int, tokens: TokenCounter) -> list[Chunk]:
    """A run the tokenizer reads longer than its lines add up to: drop lines from its end
    until it fits, and go on from there."""
    out: list[Chunk] = []
    while a <= b:
        end = b
        while end > a and tokens.count(["\n".join(lines[a : end + 1])])[0] > tokens.limit:
            end -= 1
        if tokens.count([lines[a]])[0] > tokens.limit:
            out.extend(_slices(chunk, a, lines[a], tokens))
        elif lines[a].strip():
            out.append(_lines_chunk(chunk, lines, a, end))
        a = end + 1
    return out


def _slices(chunk: Chunk, row: int, line: str, tokens: TokenCounter) -> list[Chunk]:
    """One line over the limit, cut at token boundaries into slices that each fit. The line is
    tokenized once; a slice is counted again alone (its edges can tokenize differently) and
    cut shorter in the rare case it no longer fits."""
    special = tokens.count([""])[0]
    ends = [end for _, end in tokens.offsets(line)]
    step = tokens.limit - special
    out: list[Chunk] = []
    at, k = 0, 0
    while at < len(line):
        take = step
        while True:
            end = ends[min(k + take, len(ends)) - 1] if ends and k < len(ends) else len(line)
            end = max(end, at + 1)
            if take <= 1 or tokens.count([line[at:end]])[0] <= tokens.limit:
                break
            take = max(1, take * 9 // 10)
        piece = line[at:end]
        if piece.strip():
            out.append(replace(chunk, start_line=chunk.start_line + row, end_line=chunk.start_line + row,
                               text=piece))
        at = end
        while k < len(ends) and ends[k] <= at:
            k += 1
    return out



# --- pieces and windows ----------------------------------------------------------------


@dataclass(frozen=True)
class _Piece:
    start: int  # 0-based row, inclusive
    end: int  # 0-based row, inclusive
    symbol: str | None
    kind: str  # "def" (a definition or section) or "gap" (code between definitions)
    symbol_kind: str | None = None  # "function", "method" or "class" (see SYMBOL_KINDS)


@dataclass
class _Doc:
    path: str
    language: str
    table: str
    lines: list[str]
    limits: Limits

    def __post_init__(self) -> None:
        # Prefix sums: size checks run for every definition at every nesting level.
        self._offsets = [0]
        for line in self.lines:
            self._offsets.append(self._offsets[-1] + len(line) + 1)

    def chars(self, start: int, end: int) -> int:
        return self._offsets[end + 1] - self._offsets[start] - 1

    def fits(self, start: int, end: int) -> bool:
        return end - start + 1 <= self.limits.max_lines and self.chars(start, end) <= self.limits.max_chars

    def solid(self, start: int, end: int) -> int:
        """Non-whitespace characters in rows start..end."""
        return sum(len("".join(line.split())) for line in self.lines[start : end + 1])

    def blank(self, row: int) -> bool:
        return not self.lines[row].strip()

    def chunk(self, start: int, end: int, symbol: str | None, text: str | None = None,
              kind: str | None = None) -> Chunk:
        if text is None:
            text = "\n".join(self.lines[start : end + 1])
        return Chunk(
            path=self.path, language=self.language, table=self.table,
            start_line=start + 1, end_line=end + 1, symbol=symbol, text=text, kind=kind,
        )

    def windows_of_file(self) -> list[Chunk]:
        out: list[Chunk] = []
        for start, end in _runs_of_content(self, 0, len(self.lines) - 1):
            out.extend(self.windows(start, end, None, self.limits.window_lines))
        return out

    def emit(self, pieces: Iterator[_Piece] | list[_Piece]) -> list[Chunk]:
        out: list[Chunk] = []
        unique: dict[tuple[int, int], _Piece] = {}
        for piece in pieces:
            # Two definitions on one line (minified code) would otherwise repeat that line.
            unique.setdefault((piece.start, piece.end), piece)
        for piece in _merge_tiny(self, sorted(unique.values(), key=lambda p: (p.start, p.end))):
            start, end = self.trim(piece.start, piece.end)
            if start > end:
                continue
            if self.fits(start, end):
                out.append(self.chunk(start, end, piece.symbol, kind=piece.symbol_kind))
            else:
                out.extend(self.windows(start, end, piece.symbol, self.limits.max_lines,
                                        kind=piece.symbol_kind))
        return out

    def trim(self, start: int, end: int) -> tuple[int, int]:
        while start <= end and self.blank(start):
            start += 1
        while end >= start and self.blank(end):
            end -= 1
        return start, end

    def windows(self, start: int, end: int, symbol: str | None, max_lines: int, *,
                kind: str | None = None) -> list[Chunk]:
        """Overlapping windows over rows start..end, cut at blank lines when one is near."""
        limits = self.limits
        out: list[Chunk] = []
        chunk = functools.partial(self.chunk, kind=kind)
        row = start
        while row <= end:
            if self.blank(row):
                row += 1
                continue
            line = self.lines[row]
            if len(line) > limits.max_chars:
                # One line longer than a whole chunk (minified code, a data blob): slice it,
                # so no single chunk outgrows what an encoder reads.
                for at in range(0, len(line), limits.max_chars):
                    out.append(chunk(row, row, symbol, line[at : at + limits.max_chars]))
                row += 1
                continue
            last, size = row, len(line)
            while (
                last < end
                and last - row + 1 < max_lines
                and size + 1 + len(self.lines[last + 1]) <= limits.max_chars
            ):
                last += 1
                size += 1 + len(self.lines[last])
            if last < end:
                # Prefer to end at a paragraph break in the window's second half: a window
                # that stops between two blocks needs no overlap to keep its context.
                for probe in range(last, row + (last - row) // 2, -1):
                    if self.blank(probe):
                        s, e = self.trim(row, probe)
                        out.append(chunk(s, e, symbol))
                        row = probe + 1
                        break
                else:
                    s, e = self.trim(row, last)
                    out.append(chunk(s, e, symbol))
                    # Overlap at most a quarter of the window, so windows cut short by long
                    # lines do not repeat each other.
                    row = last + 1 - min(limits.overlap, (last - row) // 4)
                continue
            s, e = self.trim(row, last)
            out.append(chunk(s, e, symbol))
            row = last + 1
        return out


def _runs_of_content(doc: _Doc, start: int, end: int) -> Iterator[tuple[int, int]]:
    """Maximal row ranges in start..end holding content, split at runs of 2+ blank lines."""
    run_start: int | None = None
    blanks = 0
    for row in range(start, end + 1):
        if doc.blank(row):
            blanks += 1
            continue
        if run_start is None:
            run_start = row
        elif blanks >= 2:
            yield run_start, row - blanks - 1
            run_start = row
        blanks = 0
    if run_start is not None:
        last = end
        while doc.blank(last):
            last -= 1
        yield run_start, last


def _merge_tiny(doc: _Doc, pieces: list[_Piece]) -> list[_Piece]:
    """Fold fragments too small to mean anything ("}", a lone import) into a neighbour."""
    out: list[_Piece] = []
    pending: _Piece | None = None  # a tiny piece waiting to be prepended to the next one

    def touching(a: _Piece, b: _Piece) -> bool:
        # Only blank lines (or nothing) between them: the merged text is still one block.
        return b.start <= a.end + 1 or all(doc.blank(r) for r in range(a.end + 1, b.start))

    def family(tiny: _Piece, other: _Piece) -> bool:
        return tiny.symbol is not None and other.symbol is not None and (
            other.symbol == tiny.symbol or other.symbol.startswith(tiny.symbol + ".")
        )

    for index, piece in enumerate(pieces):
        if pending is not None:
            if touching(pending, piece) and doc.fits(min(pending.start, piece.start), max(pending.end, piece.end)):
                piece = replace(piece, start=min(pending.start, piece.start), end=max(pending.end, piece.end))
            else:
                out.append(pending)
            pending = None
        tiny = piece.kind == "gap" and doc.solid(piece.start, piece.end) < TINY_CHARS
        if not tiny:
            out.append(piece)
            continue
        following = pieces[index + 1] if index + 1 < len(pieces) else None
        prev = out[-1] if out else None
        prefer_next = following is not None and family(piece, following) and not (prev and family(piece, prev))
        if (
            prev is not None
            and not prefer_next
            and touching(prev, piece)
            and doc.fits(prev.start, max(prev.end, piece.end))
        ):
            out[-1] = replace(prev, end=max(prev.end, piece.end))
        elif following is not None and (piece.symbol is None or family(piece, following)):
            # Top-level fragments (imports) lead into what follows; a fragment of a class
            # joins only that class's own members.
            pending = piece
        else:
            out.append(piece)
    if pending is not None:
        out.append(pending)
    return out


# --- code ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Spec:
    """What a definition is in one grammar, and how to name it."""

    grammar: Callable[[], object]
    definitions: frozenset[str]
    containers: frozenset[str]  # definitions whose members are chunked on their own when big
    # Containers whose members are always chunked on their own: a namespace or module often
    # wraps a whole file, and one chunk named after it would hide every symbol inside.
    scopes: frozenset[str] = frozenset()
    wrappers: frozenset[str] = frozenset()  # decorators, export, template<...>: hold one definition
    transparent: frozenset[str] = frozenset()  # #ifdef, extern "C": their children are siblings
    attached: frozenset[str] = frozenset({"comment"})  # leading comments belong to the next def
    namer: Callable[[object], str | None] | None = None
    docstrings: bool = False


def _text(node) -> str:
    return node.text.decode("utf-8", "replace") if node is not None and node.text is not None else ""


def _name_field(node) -> str | None:
    name = node.child_by_field_name("name")
    return _text(name) or None if name is not None else None


def _end_row(node) -> int:
    # A node that ends at column 0 ends with the newline of the row before.
    end = node.end_point
    return max(node.start_point.row, end.row - 1 if end.column == 0 else end.row)


def _js_name(node) -> str | None:
    if node.type in ("lexical_declaration", "variable_declaration"):
        for declarator in node.named_children:
            if declarator.type == "variable_declarator":
                return _name_field(declarator)
        return None
    if node.type == "expression_statement":
        assignment = node.named_children[0] if node.named_children else None
        if assignment is not None and assignment.type == "assignment_expression":
            return _text(assignment.child_by_field_name("left")) or None
        return None
    return _name_field(node)


_FUNCTION_VALUES = frozenset({
    "arrow_function", "function_expression", "function", "generator_function", "class",
})


def _js_is_definition(node) -> bool:
    """`const f = () => ...` and `X.prototype.f = function ...` define functions too."""
    if node.type in ("lexical_declaration", "variable_declaration"):
        declarators = [c for c in node.named_children if c.type == "variable_declarator"]
        return len(declarators) == 1 and _type_of(declarators[0].child_by_field_name("value")) in _FUNCTION_VALUES
    if node.type == "expression_statement":
        inner = node.named_children[0] if node.named_children else None
        return (
            inner is not None
            and inner.type == "assignment_expression"
            and _type_of(inner.child_by_field_name("right")) in _FUNCTION_VALUES
        )
    return True


def _type_of(node) -> str | None:
    return node.type if node is not None else None


def _go_name(node) -> str | None:
    if node.type == "method_declaration":
        receiver = node.child_by_field_name("receiver")
        owner = _first_descendant(receiver, "type_identifier") if receiver is not None else None
        name = _name_field(node)
        return f"{_text(owner)}.{name}" if owner is not None and name else name
    if node.type == "type_declaration":
        for spec in node.named_children:
            if spec.type in ("type_spec", "type_alias"):
                return _name_field(spec)
        return None
    return _name_field(node)


def _rust_name(node) -> str | None:
    if node.type == "impl_item":
        target = node.child_by_field_name("type")
        return re.sub(r"<.*", "", _text(target)).strip() or None
    return _name_field(node)


def _c_name(node) -> str | None:
    if node.type in ("function_definition", "type_definition"):
        declarator = node.child_by_field_name("declarator")
        # Unwrap pointer/function/reference declarators down to the name itself.
        for _ in range(16):
            if declarator is None:
                return None
            if declarator.type in (
                "identifier", "field_identifier", "type_identifier", "qualified_identifier",
                "destructor_name", "operator_name", "operator_cast", "template_function",
            ):
                return _text(declarator).replace("::", ".") or None
            declarator = declarator.child_by_field_name("declarator") or (
                declarator.named_children[0] if declarator.named_children else None
            )
        return None
    return _name_field(node)


def _first_descendant(node, kind: str):
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type == kind:
            return current
        stack.extend(reversed(current.named_children))
    return None


# --- symbol kinds ----------------------------------------------------------------------

# What a definition is, for the searches' symbol-kind filter: one table over every grammar's
# node types. A function defined inside a class-like type is a method.
SYMBOL_KINDS = ("function", "method", "class")
_CLASS_NODES = frozenset({
    "class_definition", "class_declaration", "class", "abstract_class_declaration",
    "interface_declaration", "enum_declaration", "record_declaration",
    "annotation_type_declaration", "struct_item", "enum_item", "union_item", "trait_item",
    "impl_item", "class_specifier", "struct_specifier", "union_specifier", "enum_specifier",
    "type_definition", "type_declaration",
})
_METHOD_NODES = frozenset({
    "method_definition", "method_declaration", "constructor_declaration",
    "compact_constructor_declaration", "abstract_method_signature",
})
_FUNCTION_NODES = frozenset({
    "function_definition", "function_declaration", "generator_function_declaration",
    "function_item", "function_signature_item", "function_signature",
})


def symbol_kind(node, in_type: bool = False) -> str | None:
    """"function", "method", "class" or None (a namespace, a macro, a type alias...)."""
    kind = node.type
    if kind in ("lexical_declaration", "variable_declaration", "expression_statement"):
        # `const f = () => …` defines a function; `const C = class …` a class.
        value = None
        if kind == "expression_statement":
            inner = node.named_children[0] if node.named_children else None
            value = inner.child_by_field_name("right") if inner is not None else None
        else:
            declarators = [c for c in node.named_children if c.type == "variable_declarator"]
            value = declarators[0].child_by_field_name("value") if declarators else None
        if value is None or value.type not in _FUNCTION_VALUES:
            return None
        return "class" if value.type == "class" else ("method" if in_type else "function")
    if kind in _CLASS_NODES:
        return "class"
    if kind in _METHOD_NODES:
        return "method"
    if kind in _FUNCTION_NODES:
        return "method" if in_type else "function"
    return None


def _grammar(module: str, attr: str = "language") -> Callable[[], object]:
    def load():
        import importlib

        return getattr(importlib.import_module(module), attr)()

    return load


_JS_DEFS = frozenset({
    "function_declaration", "generator_function_declaration", "class_declaration",
    "method_definition", "lexical_declaration", "variable_declaration", "expression_statement",
    "class",
})
_TS_DEFS = _JS_DEFS | {
    "abstract_class_declaration", "interface_declaration", "enum_declaration",
    "type_alias_declaration", "internal_module", "module", "function_signature",
    "abstract_method_signature",
}
_C_TRANSPARENT = frozenset({
    "preproc_ifdef", "preproc_if", "preproc_else", "preproc_elif", "preproc_elifdef",
})

_SPECS: dict[str, _Spec] = {
    "python": _Spec(
        grammar=_grammar("tree_sitter_python"),
        definitions=frozenset({"function_definition", "class_definition"}),
        containers=frozenset({"class_definition"}),
        wrappers=frozenset({"decorated_definition"}),
        docstrings=True,
    ),
    "javascript": _Spec(
        grammar=_grammar("tree_sitter_javascript"),
        definitions=_JS_DEFS,
        containers=frozenset({"class_declaration", "class"}),
        wrappers=frozenset({"export_statement"}),
        namer=_js_name,
    ),
    "typescript": _Spec(
        grammar=_grammar("tree_sitter_typescript", "language_typescript"),
        definitions=_TS_DEFS,
        containers=frozenset({
            "class_declaration", "abstract_class_declaration", "class", "internal_module",
            "module", "interface_declaration",
        }),
        scopes=frozenset({"internal_module", "module"}),
        wrappers=frozenset({"export_statement", "ambient_declaration"}),
        namer=_js_name,
    ),
    "go": _Spec(
        grammar=_grammar("tree_sitter_go"),
        definitions=frozenset({"function_declaration", "method_declaration", "type_declaration"}),
        containers=frozenset(),
        namer=_go_name,
    ),
    "rust": _Spec(
        grammar=_grammar("tree_sitter_rust"),
        definitions=frozenset({
            "function_item", "function_signature_item", "struct_item", "enum_item", "union_item",
            "trait_item", "impl_item", "mod_item", "macro_definition",
        }),
        containers=frozenset({"trait_item", "impl_item", "mod_item"}),
        scopes=frozenset({"mod_item"}),
        attached=frozenset({"line_comment", "block_comment", "attribute_item"}),
        namer=_rust_name,
    ),
    "java": _Spec(
        grammar=_grammar("tree_sitter_java"),
        definitions=frozenset({
            "class_declaration", "interface_declaration", "enum_declaration", "record_declaration",
            "annotation_type_declaration", "method_declaration", "constructor_declaration",
            "compact_constructor_declaration",
        }),
        containers=frozenset({
            "class_declaration", "interface_declaration", "enum_declaration", "record_declaration",
            "annotation_type_declaration",
        }),
        transparent=frozenset({"enum_body_declarations"}),
        attached=frozenset({"line_comment", "block_comment"}),
    ),
    "c": _Spec(
        grammar=_grammar("tree_sitter_c"),
        definitions=frozenset({
            "function_definition", "struct_specifier", "union_specifier", "enum_specifier",
            "type_definition",
        }),
        containers=frozenset(),
        transparent=_C_TRANSPARENT,
        namer=_c_name,
    ),
    "cpp": _Spec(
        grammar=_grammar("tree_sitter_cpp"),
        definitions=frozenset({
            "function_definition", "class_specifier", "struct_specifier", "union_specifier",
            "enum_specifier", "type_definition", "namespace_definition",
        }),
        containers=frozenset({"class_specifier", "struct_specifier", "union_specifier", "namespace_definition"}),
        scopes=frozenset({"namespace_definition"}),
        wrappers=frozenset({"template_declaration"}),
        transparent=_C_TRANSPARENT | {"linkage_specification", "declaration_list"},
        namer=_c_name,
    ),
}
_SPECS["tsx"] = replace(_SPECS["typescript"], grammar=_grammar("tree_sitter_typescript", "language_tsx"))
# Types that only count as definitions when they carry a body (a forward declaration
# `struct S;` or `typedef int T;` is one line of context, not a unit of meaning).
_NEEDS_BODY = frozenset({"struct_specifier", "union_specifier", "enum_specifier", "class_specifier"})


@cache
def _language(language: str):
    """One grammar per language per process: loading it is the slow part."""
    import tree_sitter

    return tree_sitter.Language(_SPECS[language].grammar())


_parsers = threading.local()


def _parser(language: str):
    # A Parser holds parse state and is not safe to share between threads (two index jobs
    # chunk in two worker threads), so each thread keeps its own, built once per language.
    cached = getattr(_parsers, "by_language", None)
    if cached is None:
        cached = _parsers.by_language = {}
    if language not in cached:
        import tree_sitter

        cached[language] = tree_sitter.Parser(_language(language))
    return cached[language]


def _is_definition(spec: _Spec, node) -> bool:
    if node.type not in spec.definitions:
        return False
    if node.type in ("lexical_declaration", "variable_declaration", "expression_statement"):
        if node.type == "expression_statement":
            inner = node.named_children[0] if node.named_children else None
            if inner is not None and inner.type in ("internal_module", "module"):
                return False  # a namespace: unwrapped as a wrapper below
        return _js_is_definition(node)
    if node.type in _NEEDS_BODY:
        return node.child_by_field_name("body") is not None
    if node.type == "type_definition":
        kind = node.child_by_field_name("type")
        return kind is not None and kind.child_by_field_name("body") is not None
    return True


def _unwrap(spec: _Spec, node):
    """The definition a node stands for (itself, or the one a wrapper holds), else None."""
    for _ in range(4):
        if _is_definition(spec, node):
            return node
        if node.type in spec.wrappers or (
            node.type == "expression_statement" and node.named_children
            and node.named_children[0].type in ("internal_module", "module")
        ):
            inner = node.child_by_field_name("definition") or node.child_by_field_name("declaration")
            if inner is None:
                candidates = [c for c in node.named_children if c.type not in spec.attached]
                inner = candidates[-1] if candidates else None
            if inner is None:
                return None
            node = inner
            continue
        return None
    return None


def _members(spec: _Spec, node, depth: int = 0) -> Iterator:
    """Children of a container's body, with transparent blocks (#ifdef) flattened."""
    body = node.child_by_field_name("body") if node.type in spec.containers else node
    if body is None:
        return
    for child in body.named_children:
        if child.type in spec.transparent and depth < MAX_DEPTH:
            yield from _members(spec, child, depth + 1)
            # A transparent block that also has a body field (extern "C" { ... }).
            inner = child.child_by_field_name("body")
            if inner is not None and inner.type not in spec.transparent:
                yield from _members(spec, inner, depth + 1)
        else:
            yield child


def _chunk_code(doc: _Doc, spec: _Spec) -> list[Chunk]:
    source = "\n".join(doc.lines).encode("utf-8", "surrogatepass")
    tree = _parser(doc.language).parse(source)
    pieces: list[_Piece] = []
    _cover(doc, spec, tree.root_node, 0, len(doc.lines) - 1, None, pieces, 0)
    chunks = doc.emit(pieces)
    if spec.docstrings:
        # A docs chunk identical to a code chunk (a module that is only its docstring) would
        # share its chunk_id, which is unique per project across both tables.
        taken = {c.chunk_id for c in chunks}
        chunks.extend(c for c in _python_docstrings(doc, tree.root_node) if c.chunk_id not in taken)
    return chunks


def _cover(doc: _Doc, spec: _Spec, container, lo: int, hi: int, scope: str | None, out: list[_Piece], depth: int,
           in_type: bool = False) -> None:
    """Pieces for rows lo..hi of a container: one per definition, gaps for the rest.
    `in_type`: the container is a class-like type, so its functions are methods."""
    covered: list[tuple[int, int]] = []
    attach_from: int | None = None  # first row of the leading comments run, if any
    attach_end = -2
    for child in _members(spec, container):
        start, end = child.start_point.row, _end_row(child)
        if child.type in spec.attached:
            if attach_from is None or start > attach_end + 1:
                attach_from = start
            attach_end = end
            continue
        definition = _unwrap(spec, child)
        if definition is None:
            attach_from = None
            continue
        if attach_from is not None and start <= attach_end + 1:
            start = attach_from
        attach_from = None
        start, end = max(start, lo), min(end, hi)
        if start > end:
            continue
        name = (spec.namer or _name_field)(definition) or "<anonymous>"
        symbol = f"{scope}.{name}" if scope else name
        kind = symbol_kind(definition, in_type)
        covered.append((start, end))
        if depth >= MAX_DEPTH or (doc.fits(start, end) and definition.type not in spec.scopes):
            out.append(_Piece(start, end, symbol, "def", kind))
        elif definition.type in spec.containers:
            _cover(doc, spec, definition, start, end, symbol, out, depth + 1,
                   in_type=kind == "class")
        else:
            out.append(_Piece(start, end, symbol, "def", kind))
    # Whatever no definition claimed (imports, constants, a class header, a closing brace)
    # is indexed too, under the container's symbol.
    row = lo
    for start, end in sorted(covered) + [(hi + 1, hi + 1)]:
        if start > row:
            for run_start, run_end in _runs_of_content(doc, row, start - 1):
                out.append(_Piece(run_start, run_end, scope, "gap"))
        row = max(row, end + 1)


def _python_docstrings(doc: _Doc, root) -> list[Chunk]:
    """Module, class and function docstrings, also as docs-table chunks (prose about code)."""
    found: list[tuple[int, int, str | None, str | None]] = []

    def first_string(block) -> object | None:
        statements = [c for c in block.named_children if c.type != "comment"] if block is not None else []
        if not statements:
            return None
        first = statements[0]
        if first.type == "expression_statement" and first.named_children and first.named_children[0].type == "string":
            return first.named_children[0]
        return None

    def visit(node, scope: str | None, depth: int, in_type: bool = False) -> None:
        if depth > MAX_DEPTH:
            return
        for child in node.named_children:
            target = child.child_by_field_name("definition") if child.type == "decorated_definition" else child
            if target is None or target.type not in ("function_definition", "class_definition"):
                continue
            name = _name_field(target) or "<anonymous>"
            symbol = f"{scope}.{name}" if scope else name
            body = target.child_by_field_name("body")
            kind = symbol_kind(target, in_type)
            string = first_string(body)
            if string is not None:
                found.append((string.start_point.row, _end_row(string), symbol, kind))
            if body is not None:
                visit(body, symbol, depth + 1, in_type=kind == "class")

    module_doc = first_string(root)
    if module_doc is not None:
        found.append((module_doc.start_point.row, _end_row(module_doc), None, None))
    visit(root, None, 0)
    docs = _Doc(path=doc.path, language=doc.language, table=DOCS, lines=doc.lines, limits=doc.limits)
    out: list[Chunk] = []
    for start, end, symbol, kind in sorted(found, key=lambda f: f[0]):
        if docs.solid(start, end) < TINY_CHARS:
            continue
        if docs.fits(start, end):
            out.append(docs.chunk(start, end, symbol, kind=kind))
        else:
            out.extend(docs.windows(start, end, symbol, docs.limits.max_lines, kind=kind))
    return out


# --- docs ------------------------------------------------------------------------------

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_RST_ADORNMENT = re.compile(r"^([=\-~^\"'`#*+:._!$%&,;<>?@\\|/])\1{2,}[ \t]*$")


def _doc_sections(lines: list[str], language: str) -> list[_Piece]:
    headings = _rst_headings(lines) if language == "rst" else _markdown_headings(lines)
    sections: list[_Piece] = []
    path: list[tuple[int, str]] = []  # (level, title) of the enclosing headings
    first = headings[0][0] if headings else len(lines)
    if first > 0:
        sections.append(_Piece(0, first - 1, None, "gap"))
    for index, (row, level, title) in enumerate(headings):
        end = headings[index + 1][0] - 1 if index + 1 < len(headings) else len(lines) - 1
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, title))
        sections.append(_Piece(row, end, " > ".join(t for _, t in path), "def"))
    return _merge_heading_only(lines, sections)


def _merge_heading_only(lines: list[str], sections: list[_Piece]) -> list[_Piece]:
    """A heading with no body of its own ("# Guide" right before "## Install") joins the
    section after it, whose heading path already names it."""
    out: list[_Piece] = []
    carry: int | None = None
    for index, section in enumerate(sections):
        heading_row = section.start
        if carry is not None:
            section = replace(section, start=carry)
            carry = None
        body = [
            line for line in lines[heading_row + 1 : section.end + 1]
            if line.strip() and not _SETEXT.match(line) and not _RST_ADORNMENT.match(line)
        ]
        if (
            section.kind == "def"
            and index + 1 < len(sections)
            and not body
        ):
            carry = section.start
            continue
        out.append(section)
    return out


def _markdown_headings(lines: list[str]) -> list[tuple[int, int, str]]:
    headings: list[tuple[int, int, str]] = []
    fence: str | None = None
    row = 0
    # YAML front matter is metadata, not a setext heading.
    if lines and lines[0].strip() == "---":
        for probe in range(1, min(len(lines), 200)):
            if lines[probe].strip() in ("---", "..."):
                row = probe + 1
                break
    while row < len(lines):
        line = lines[row]
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            row += 1
            continue
        if opened:
            fence = opened.group(1)
            row += 1
            continue
        atx = _ATX.match(line)
        if atx:
            headings.append((row, len(atx.group(1)), (atx.group(2) or "").strip() or "#" * len(atx.group(1))))
        elif (
            row + 1 < len(lines)
            and line.strip()
            and not line.startswith(("    ", "\t"))
            and _SETEXT.match(lines[row + 1])
            and (row == 0 or not lines[row - 1].strip())
        ):
            level = 1 if lines[row + 1].strip().startswith("=") else 2
            headings.append((row, level, line.strip()))
            row += 1
        row += 1
    return headings


def _rst_headings(lines: list[str]) -> list[tuple[int, int, str]]:
    """Titles underlined (optionally also overlined) by a punctuation run; the level of a
    style (character, overline or not) is the order in which the document first uses it."""
    styles: list[tuple[str, bool]] = []
    headings: list[tuple[int, int, str]] = []
    row = 0
    while row + 1 < len(lines):
        title, under = lines[row], lines[row + 1]
        overline = False
        start = row
        if _RST_ADORNMENT.match(title) and row + 2 < len(lines) and _RST_ADORNMENT.match(lines[row + 2]):
            # Overlined title: adornment, title, adornment.
            overline, title, under = True, lines[row + 1], lines[row + 2]
            if title.strip() and not _RST_ADORNMENT.match(title) and len(under.rstrip()) >= len(title.strip()):
                style = (under.strip()[0], True)
                if style not in styles:
                    styles.append(style)
                headings.append((start, styles.index(style) + 1, title.strip()))
                row += 3
                continue
        if (
            title.strip()
            and not title.startswith((" ", "\t"))
            and not _RST_ADORNMENT.match(title)
            and _RST_ADORNMENT.match(under)
            and len(under.rstrip()) >= len(title.rstrip())
        ):
            style = (under.strip()[0], overline)
            if style not in styles:
                styles.append(style)
            headings.append((row, styles.index(style) + 1, title.strip()))
            row += 2
            continue
        row += 1
    return headings
