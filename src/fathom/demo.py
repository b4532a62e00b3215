"""`make demo`: index a real codebase that is already on this machine, then search it.

The codebase is the installed source of `rich` (about 100 modules and 2,000 chunks: big enough
to be real, small enough to index in a minute or two on two CPU cores). Everything runs
locally with the embedded MiniLM encoder; nothing is downloaded. The index lives in
`.fathom/demo/` under the current folder (or `FATHOM_DATA_DIR`), so a second run is
incremental and quick.

Each query names the module a person would expect to find, and the demo reports whether the
top hits agree, so "the results are relevant" is checked, not just printed.

This module refuses to be anything but a walkthrough: it composes the same `Fathom` service,
progress bar and tables as the CLI.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from rich.rule import Rule

from fathom.cli.core import index_with_progress, print_hits, print_report
from fathom.cli.output import console, err_console, show_error
from fathom.config import Settings
from fathom.datadir import private_umask
from fathom.errors import FathomError
from fathom.service import Fathom

PROJECT = "rich"

# (table, query, module a person would expect among the top hits)
QUERIES: list[tuple[str, str, str]] = [
    ("code", "progress bar showing percentage complete and estimated time remaining", "progress"),
    ("code", "syntax highlighting of source code with line numbers", "syntax.py"),
    ("code", "render a table with borders and aligned columns", "table.py"),
    ("code", "parse ANSI escape sequences into styled text", "ansi.py"),
    ("code", "pretty print nested data structures like dicts and lists", "pretty.py"),
    ("docs", "how do I send log messages through rich with colours", "logging.py"),
    ("docs", "render markdown documents in the terminal", "markdown.py"),
]


def demo_codebase() -> Path:
    import rich

    return Path(rich.__file__).parent


def demo_settings() -> Settings:
    settings = Settings()
    if "data_dir" in settings.model_fields_set:  # FATHOM_DATA_DIR given
        return settings
    return settings.model_copy(update={"data_dir": Path.cwd() / ".fathom" / "demo"})


async def run_demo(settings: Settings, root: Path, *, k: int = 3) -> tuple[int, int]:
    fathom = Fathom(settings)
    console.print(Rule(f"Fathom demo: indexing {root}"))
    console.print(f"data dir: {settings.data_dir}  encoder: {fathom.encoder.id}")
    report = await index_with_progress(fathom, root, PROJECT, full=False)
    print_report(report)
    relevant = 0
    for table, query, expected in QUERIES:
        console.print()
        hits = await fathom.search(query, project=PROJECT, table=table, k=k)
        print_hits(hits, f"{table}: {query}")
        found = any(expected in h.path for h in hits)
        relevant += found
        mark = "[green]✓[/]" if found else "[yellow]✗[/]"
        console.print(f"  {mark} expected {expected} in the top {k}")
    console.print()
    console.print(Rule(f"{relevant}/{len(QUERIES)} queries found the expected module in the top {k}"))
    console.print(
        f'Try it yourself: fathom --data-dir {settings.data_dir} search "QUERY" --project {PROJECT}'
    )
    await fathom.aclose()
    return relevant, len(QUERIES)


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    private_umask()  # the index it writes is this user's alone
    try:
        relevant, total = asyncio.run(run_demo(demo_settings(), demo_codebase()))
    except FathomError as exc:
        show_error(exc)
        return 2
    except KeyboardInterrupt:
        err_console.print("interrupted: run `make demo` again to resume")
        return 130
    # Most queries must land: a demo that shows irrelevant results is a failed demo.
    return 0 if relevant * 2 > total else 1


if __name__ == "__main__":
    sys.exit(main())
