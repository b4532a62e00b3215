"""The user's docs speak the user's words: no internal requirement codes (`R4`, `R11`) and no
`python -m fathom.…` spelling of a command, only the `fathom …` commands.

The codes are the project's own bookkeeping; a reader meets them unexplained. Two spellings of
one command drift apart; `fathom server`, `fathom sidecar` and `fathom store migrate` are the
ones the CLI documents. The dev-only tools under `fathom.devtools` (the OpenRouter emulator, the
scripted local LLM server) have no `fathom` command by design (the product never imports
them), so their module may be named: only as a module, never as `python -m`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE = re.compile(r"\bR[0-9]{1,2}\b")
MODULE_COMMAND = re.compile(r"python3? -m fathom\.[\w.]*")


def offences(text: str) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for pattern in (CODE, MODULE_COMMAND):
            found += [f"line {number}: {m.group(0)!r} in {line.strip()[:100]!r}" for m in pattern.finditer(line)]
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_docs_use_plain_words_and_fathom_commands(doc: Path):
    assert offences(doc.read_text()) == []


def test_the_check_finds_what_it_looks_for():
    assert offences("the gate (R3) refuses it") and offences("$ python -m fathom.server --port 1")
    assert not offences("fathom server --port 8765; R&D; HTTP/2; RR10x")
