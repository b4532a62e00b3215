"""How many of Fathom's modules one index run crosses, and which.

    .venv/bin/python bench/index_modules.py [REPO]

REPO (default: this checkout) is a tree with `src/fathom` and `tests`; to count an earlier
commit, unpack it beside this one first:
`git archive 83f4fbd src tests | tar -x -C /tmp/before && .venv/bin/python bench/index_modules.py /tmp/before`.

The run is a first `Fathom.index` of the test suite's small project into a fresh data dir,
with the tests' hashing encoder (no model code in the count). A `sys.setprofile` hook, in
every thread, records each module whose functions the run calls; module and class bodies
(lazy imports) are not counted. docs/architecture.md's walk of an index run quotes it.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

CO_OPTIMIZED = 0x1  # set on functions, lambdas and comprehensions; not on module or class bodies


def crossed(root: Path) -> list[str]:
    """The modules (relative to `src/fathom`) an index run of `root`'s Fathom calls into."""
    sys.path[:0] = [str(root / "src"), str(root)]
    from tests.fleet.fleet_fixtures import HashEmbedder
    from tests.server.admin_fixtures import make_project

    from fathom.config import Settings
    from fathom.service import Fathom

    base = Path(tempfile.mkdtemp(prefix="fathom-index-modules-"))
    fathom = Fathom(Settings(data_dir=base / "data"), encoder=HashEmbedder(width=8))
    project = make_project(base / "project")
    seen: set[str] = set()
    marker = f"{root / 'src' / 'fathom'}/"

    def record(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_flags & CO_OPTIMIZED:
            name = frame.f_code.co_filename
            if name.startswith(marker):
                seen.add(name.removeprefix(marker))

    sys.setprofile(record)
    threading.setprofile(record)
    try:
        asyncio.run(fathom.index(project, "project"))
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return sorted(seen)


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]).resolve()
    modules = crossed(root)
    print(f"{len(modules)} modules crossed by one index run ({root})")
    for module in modules:
        print(f"  {module}")


if __name__ == "__main__":
    main()
