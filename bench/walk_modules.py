"""How many of Fathom's modules one index run and one search cross, and which.

    .venv/bin/python bench/walk_modules.py [REPO] [--list]

REPO (default: this checkout) is a tree with `src/fathom` and `tests`; to count an earlier
commit, unpack it beside this one first:
`git archive 83f4fbd src tests | tar -x -C /tmp/at83f4fbd && .venv/bin/python bench/walk_modules.py /tmp/at83f4fbd`.

The index run is a first `Fathom.index` of the test suite's small project into a fresh data
dir, with the tests' hashing encoder (no model code in the count). The search is one
`search_code` call through an in-memory MCP client on that index, the second of two (the
first opens tables and caches; the second is what every later search costs), counted from the
server's dispatch of the call to its answer, in every thread it uses (the tool-list check the
MCP server runs after every request, whatever it was, is not the search's). A
`sys.setprofile` hook, in every thread, records each module whose functions the step calls;
module and class bodies (lazy imports) are not counted. The vocabulary every layer speaks
(`errors`, `config`, `clock`, `roles`, `policy`, `space`, `logsafe`: the bottom layer of
tests/test_layers.py) is counted apart. Each other module is sorted by what it is to the step:
one that calls into another module above the vocabulary is a station on the walk (control
passes through it), one that calls into none is a part the walk uses. docs/architecture.md's
walks quote these figures.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any

CO_OPTIMIZED = 0x1  # set on functions, lambdas and comprehensions; not on module or class bodies
VOCABULARY = {f"{name}.py" for name in ("errors", "config", "clock", "roles", "policy", "space", "logsafe")}


class Walk:
    """The modules one step calls into, and which of them call into another."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.seen: set[str] = set()
        self.stations: set[str] = set()
        self.active = True  # False: the hook stays installed (a thread keeps its own) but records nothing

    def module_of(self, frame: FrameType | None) -> str | None:
        name = frame.f_code.co_filename if frame is not None else ""
        return name.removeprefix(self.marker) if name.startswith(self.marker) else None

    def record(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.active or event != "call" or not frame.f_code.co_flags & CO_OPTIMIZED:
            return
        module = self.module_of(frame)
        if module is None:
            return
        self.seen.add(module)
        caller = frame.f_back
        while caller is not None and self.module_of(caller) is None:
            caller = caller.f_back  # through the libraries in between (asyncio, anyio, mcp)
        calling = self.module_of(caller)
        if calling is not None and calling != module and module not in VOCABULARY:
            self.stations.add(calling)

    def run(self, step: Callable[[], Awaitable[Any]]) -> None:
        sys.setprofile(self.record)
        threading.setprofile(self.record)
        try:
            asyncio.run(step())  # type: ignore[arg-type]
        finally:
            sys.setprofile(None)
            threading.setprofile(None)


def fixtures() -> tuple[Any, Any]:
    """The hashing encoder and the small project, where `root`'s tests keep them."""
    try:
        from tests.fleet.fleet_fixtures import HashEmbedder
        from tests.server.admin_fixtures import make_project
    except ImportError:  # the flat tests/ of an earlier commit
        from tests.admin_fixtures import make_project  # type: ignore[no-redef]
        from tests.fleet_fixtures import HashEmbedder  # type: ignore[no-redef]
    return HashEmbedder, make_project


def walks(root: Path) -> dict[str, Walk]:
    """The index run's walk and the search's, over `root`'s Fathom."""
    sys.path[:0] = [str(root / "src"), str(root)]
    hash_embedder, make_project = fixtures()
    base = Path(tempfile.mkdtemp(prefix="fathom-walk-modules-"))
    try:
        return _walks(root, base, hash_embedder, make_project)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _walks(root: Path, base: Path, hash_embedder: Any, make_project: Any) -> dict[str, Walk]:
    from mcp import Client

    from fathom.config import Settings
    from fathom.server.mcp_tools import build_mcp_server
    from fathom.service import Fathom

    fathom = Fathom(Settings(data_dir=base / "data"), encoder=hash_embedder(width=8))
    project = make_project(base / "project")
    marker = f"{root / 'src' / 'fathom'}/"
    index, search = Walk(marker), Walk(marker)
    index.run(lambda: fathom.index(project, "project"))

    # Counted: the tool call from the MCP server's dispatch to its answer, in every thread it
    # uses. Not counted: the tool-list check the server runs after every request, whatever it was.
    tool_server = type(server := build_mcp_server(fathom))
    dispatch = tool_server.call_tool

    async def counted(self: Any, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        search.active = measuring
        try:
            return await dispatch(self, name, arguments, context)
        finally:
            search.active = False

    async def two_searches() -> None:
        nonlocal measuring
        async with Client(server) as client:
            await client.call_tool("search_code", {"query": "retry the request", "k": 5})
            # the worker threads from here on start with the hook (a running thread cannot take one)
            asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor())
            measuring = True
            answer = await client.call_tool("search_code", {"query": "password check", "k": 5})
            assert not answer.is_error, answer

    measuring, search.active = False, False
    tool_server.call_tool = counted  # type: ignore[method-assign]
    search.run(two_searches)
    return {"index run": index, "search": search}


def main() -> None:
    args = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    root = Path(args[0] if args else Path(__file__).resolve().parents[1]).resolve()
    for name, walk in walks(root).items():
        words = walk.seen & VOCABULARY
        print(
            f"one {name}: {len(walk.seen)} modules crossed, {len(walk.seen - words)} above the vocabulary, "
            f"{len(walk.stations)} of them stations ({root})"
        )
        if "--list" in sys.argv:
            for module in sorted(walk.seen):
                role = "words  " if module in words else "station" if module in walk.stations else "part   "
                print(f"  {role}  {module}")


if __name__ == "__main__":
    main()
