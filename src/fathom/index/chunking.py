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

This module is the entry point (`chunk_file`) and exports every name of chunking; the parts live
in `fathom.index.chunkers`: languages, limits, tokens, pieces and windows, the grammar tables,
the code chunker and the docs chunker.
"""

from __future__ import annotations

import logging

from fathom.index.chunk import Chunk
from fathom.index.chunkers.code import chunk_code
from fathom.index.chunkers.docs import doc_sections
from fathom.index.chunkers.grammars import SPECS, SYMBOL_KINDS, symbol_kind
from fathom.index.chunkers.languages import (
    CODE,
    DOC_LANGUAGES,
    DOCS,
    LANGUAGES,
    detect_language,
    source_lines,
)
from fathom.index.chunkers.limits import (
    MAX_CHARS,
    MAX_DEPTH,
    MAX_LINES,
    OVERLAP_LINES,
    TINY_CHARS,
    WINDOW_LINES,
    Limits,
)
from fathom.index.chunkers.pieces import Doc
from fathom.index.chunkers.tokens import EstimatedTokens, TokenCounter, fit_tokens

# Every public name chunking exported before its parts moved to `fathom.index.chunkers`.
__all__ = [
    "CODE",
    "DOCS",
    "DOC_LANGUAGES",
    "EstimatedTokens",
    "LANGUAGES",
    "Limits",
    "MAX_CHARS",
    "MAX_DEPTH",
    "MAX_LINES",
    "OVERLAP_LINES",
    "SYMBOL_KINDS",
    "TINY_CHARS",
    "TokenCounter",
    "WINDOW_LINES",
    "chunk_file",
    "detect_language",
    "fit_tokens",
    "source_lines",
    "symbol_kind",
]


# The name it logged under before its parts moved: log filters and tests select on it.
log = logging.getLogger("fathom.index.chunking")


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
    doc = Doc(path=path, language=language, table=table, lines=lines, limits=limits)
    try:
        if table == DOCS:
            return doc.emit(doc_sections(lines, language))
        spec = SPECS.get(language)
        if spec is None:
            return doc.windows_of_file()
        return chunk_code(doc, spec)
    except Exception:  # the contract is "never raise"; windows index everything
        log.warning("chunking %s as %s failed; indexing it as line windows", path, language, exc_info=True)
        return doc.windows_of_file()
