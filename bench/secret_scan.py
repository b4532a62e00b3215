"""The secret scan's speed and its quiet: `fathom.index.secrets.scan` over real code that holds no
credentials (Starlette as installed, this repository's own `src/`, and with `--site-packages`
every text file of the installed packages), in MB/s, with the files it finds something in
counted per rule (by path only: nothing matched is printed).

Each file is read as UTF-8 (others are skipped, as most binaries are) up to the walker's size
limit, then scanned whole, every finding collected (no early exit), best of `--runs`. Run:
`.venv/bin/python bench/secret_scan.py` (a few seconds; `--site-packages`: a few minutes).
"""

from __future__ import annotations

import argparse
import site
import sys
import time
from collections import Counter
from pathlib import Path

import _common  # noqa: F401 - puts src/ on the path
import starlette
from _common import machine, table

import fathom
from fathom.index.secrets import scan
from fathom.index.walker import MAX_FILE_BYTES


def corpus(folder: Path) -> list[tuple[str, str]]:
    """(path relative to `folder`, text) of every UTF-8 file under it, up to the size limit."""
    out = []
    for path in sorted(folder.rglob("*")):
        try:
            if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_FILE_BYTES:
                continue
            out.append((path.relative_to(folder).as_posix(), path.read_text("utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    return out


def measure(files: list[tuple[str, str]], runs: int) -> tuple[float, dict[str, list[str]]]:
    """(MB/s, best of `runs`; {rule: the paths it finds something in})."""
    best = float("inf")
    flagged: dict[str, list[str]] = {}
    for _ in range(runs):
        found: dict[str, set[str]] = {}
        start = time.perf_counter()
        for rel, text in files:
            for finding in scan(text, rel):
                found.setdefault(finding.rule, set()).add(rel)
        best = min(best, time.perf_counter() - start)
        flagged = {rule: sorted(paths) for rule, paths in found.items()}
    size = sum(len(text.encode("utf-8", "surrogatepass")) for _, text in files)
    return size / 1e6 / best, flagged


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--site-packages",
        action="store_true",
        help="also every text file of the installed packages (419 MB here)",
    )
    parser.add_argument("--paths", action="store_true", help="name each flagged file")
    args = parser.parse_args(argv)
    corpora = {
        "Starlette, as installed": Path(starlette.__file__).parent,
        "fathom's own src/": Path(fathom.__file__).parent,
    }
    if args.site_packages:
        corpora["the installed site-packages"] = Path(site.getsitepackages()[0])
    print(machine())
    rows = []
    for name, folder in corpora.items():
        files = corpus(folder)
        rate, flagged = measure(files, 1 if args.site_packages and "site" in name else args.runs)
        paths = {p for found in flagged.values() for p in found}
        per_rule = Counter({rule: len(found) for rule, found in flagged.items()})
        rows.append(
            [
                name,
                len(files),
                f"{rate:.1f}",
                len(paths),
                ", ".join(f"{r} {n}" for r, n in per_rule.most_common()) or "-",
            ]
        )
        if args.paths:
            for rule, found in sorted(flagged.items()):
                for p in found:
                    print(f"  {name}: {rule}: {p}", file=sys.stderr)
    print(table(["corpus", "files", "MB/s", "files flagged", "by rule"], rows))


if __name__ == "__main__":
    main()
