"""The user's docs speak the user's words: no internal requirement codes (`R4`, `R11`), no
issue numbers (`issue 20`), and no `python -m fathom.…` spelling of a command, only the
`fathom …` commands.

The codes and issue numbers are the project's own bookkeeping; a reader meets them unexplained
(a figure says what changed, not which ticket changed it). Two spellings of
one command drift apart; `fathom server`, `fathom sidecar` and `fathom store migrate` are the
ones the CLI documents. The dev-only tools under `fathom.devtools` (the OpenRouter emulator, the
scripted local LLM server) have no `fathom` command by design (the product never imports
them), so their module may be named: only as a module, never as `python -m`.

The product's own text (docstrings, comments, messages, packaged data under `src/fathom`) says
the rule itself too, never a requirement code or an issue number: neither is defined anywhere
in the repository, and a message carrying one reaches the user.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE = re.compile(r"\bR[0-9]{1,2}\b")
ISSUE = re.compile(r"\bissues?\s+#?[0-9]+", re.IGNORECASE)  # also across a line break
MODULE_COMMAND = re.compile(r"python3? -m fathom\.[\w.]*")
SOURCE = ROOT / "src" / "fathom"
SOURCE_FILES = sorted(
    p
    for p in SOURCE.rglob("*")
    if p.suffix in {".py", ".json", ".html", ".js", ".css", ".md", ".txt", ".toml"}
)


def offences(text: str, patterns: tuple[re.Pattern[str], ...] = (CODE, ISSUE, MODULE_COMMAND)) -> list[str]:
    lines = text.splitlines()
    found = []
    for pattern in patterns:
        for m in pattern.finditer(text):
            number = text.count("\n", 0, m.start()) + 1
            found.append(
                f"line {number}: {' '.join(m.group(0).split())!r} in {lines[number - 1].strip()[:100]!r}"
            )
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_docs_use_plain_words_and_fathom_commands(doc: Path):
    assert offences(doc.read_text()) == []


def test_the_check_finds_what_it_looks_for():
    assert offences("the gate (R3) refuses it") and offences("$ python -m fathom.server --port 1")
    assert offences("0.863 before issue 20") and offences("(Issue #4)") and offences("issues 10")
    assert offences("0.863 before issue\n20, at load 2")
    assert not offences("fathom server --port 8765; R&D; HTTP/2; RR10x; an issue with 20 files")


def test_the_source_names_rules_not_requirement_codes_or_issues():
    assert len(SOURCE_FILES) > 100  # the walk found the package, not an empty folder
    found = {
        str(p.relative_to(ROOT)): hits
        for p in SOURCE_FILES
        if (hits := offences(p.read_text(encoding="utf-8"), (CODE, ISSUE)))
    }
    assert found == {}


def test_the_source_check_finds_codes_and_issues_only():
    assert offences('"""Fail closed (R4)."""', (CODE, ISSUE))
    assert offences("# see issue 28 for why", (CODE, ISSUE)) and offences("Issue #7", (CODE, ISSUE))
    assert not offences('GR1348941, r"\\bR[0-9]{1,2}\\b", R2_score, "issues: 3", HR10', (CODE, ISSUE))
