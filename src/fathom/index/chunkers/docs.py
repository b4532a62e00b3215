"""Heading-aware chunking of docs: Markdown (ATX and setext headings, fenced code left
alone, front matter as a section of its own) and reStructuredText sections; each section is a
piece named by its heading path.
"""

from __future__ import annotations

import re
from dataclasses import replace

from fathom.index.chunkers.limits import TINY_CHARS
from fathom.index.chunkers.pieces import Piece

FRONT_MATTER = "front matter"
# YAML (`---`) or TOML (`+++`) metadata at the top of a page; longer than this it is no header.
_FRONT_MATTER_LINES = 200


_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_RST_ADORNMENT = re.compile(r"^([=\-~^\"'`#*+:._!$%&,;<>?@\\|/])\1{2,}[ \t]*$")


def doc_sections(lines: list[str], language: str) -> list[Piece]:
    headings = _rst_headings(lines) if language == "rst" else _markdown_headings(lines)
    sections: list[Piece] = []
    path: list[tuple[int, str]] = []  # (level, title) of the enclosing headings
    first = headings[0][0] if headings else len(lines)
    front = front_matter_end(lines) if language == "markdown" else None
    if front is not None:
        # The page's metadata (title, tags, summary) is a unit of its own; a bare
        # `layout: post` is too small for that and leads into what follows.
        solid = sum(len("".join(line.split())) for line in lines[1:front])
        big = solid >= TINY_CHARS
        sections.append(Piece(0, front, FRONT_MATTER if big else None, "def" if big else "gap"))
    start = front + 1 if front is not None else 0
    if first > start:
        sections.append(Piece(start, first - 1, None, "gap"))
    for index, (row, level, title) in enumerate(headings):
        end = headings[index + 1][0] - 1 if index + 1 < len(headings) else len(lines) - 1
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, title))
        sections.append(Piece(row, end, " > ".join(t for _, t in path), "def"))
    return _merge_heading_only(lines, sections)


def _merge_heading_only(lines: list[str], sections: list[Piece]) -> list[Piece]:
    """A heading with no body of its own ("# Guide" right before "## Install") joins the
    section after it, whose heading path already names it."""
    out: list[Piece] = []
    carry: int | None = None
    for index, section in enumerate(sections):
        heading_row = section.start
        if carry is not None:
            section = replace(section, start=carry)
            carry = None
        body = [
            line
            for line in lines[heading_row + 1 : section.end + 1]
            if line.strip() and not _SETEXT.match(line) and not _RST_ADORNMENT.match(line)
        ]
        if section.kind == "def" and index + 1 < len(sections) and not body:
            carry = section.start
            continue
        out.append(section)
    return out


def _markdown_headings(lines: list[str]) -> list[tuple[int, int, str]]:
    headings: list[tuple[int, int, str]] = []
    fence: str | None = None
    front = front_matter_end(lines)
    # Front matter is metadata, not a setext heading.
    row = front + 1 if front is not None else 0
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


def front_matter_end(lines: list[str]) -> int | None:
    """The row that closes a Markdown page's front matter (`---` … `---` or `...`, or
    `+++` … `+++`), or None when the page opens with none."""
    opening = lines[0].strip() if lines else ""
    if opening not in ("---", "+++"):
        return None
    closing = ("---", "...") if opening == "---" else ("+++",)
    for probe in range(1, min(len(lines), _FRONT_MATTER_LINES)):
        if lines[probe].strip() in closing:
            return probe
    return None


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
            if (
                title.strip()
                and not _RST_ADORNMENT.match(title)
                and len(under.rstrip()) >= len(title.strip())
            ):
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
