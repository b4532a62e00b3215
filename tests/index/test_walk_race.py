"""A folder swapped for a link while Fathom lists and reads it: no byte from outside the project
is ever served.

The attack: inside the project, `sub/` is a real folder and `lnk` a link to a folder outside it
holding files of the same names. A second process exchanges the two names atomically
(`renameat2(RENAME_EXCHANGE)`, `tests/index/swapper.py`) thousands of times a second. A reader that
lists `sub/` (a folder) and then opens `root/sub/inside.py` by its path reads the outside file
whenever the exchange lands in between; a walk that opens every folder and file through its
parent's descriptor without following links never does.

- the walker itself, `walk` and `read_one` (what `read_code` reads through), and the agents'
  file tools built on it (`read_file`, `list_dir`, `grep`), round after round;
- the assembled product: the real server on 127.0.0.1 indexing the project again and again
  through the admin API while an MCP client (a scoped token over streamable HTTP) reads it with
  `read_code` and `search_code`; nothing from outside reaches the index, an answer, or the
  comparison `read_code` makes with the file on disk.

Each race is bounded: it runs until enough swaps and rounds are done or its deadline passes,
and the swapper stops by itself after a minute whatever happens.
"""

from __future__ import annotations

import errno
import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from fathom.agents.tools import ProjectTools
from fathom.config import Settings
from fathom.index import walker
from fathom.index.walker import ReadRefused, WalkUnsupported, read_one, walk
from fathom.index.walking import tree as tree_mod
from tests.fleet.fleet_fixtures import serve_in_loop
from tests.index.swapper import Swapper, exchanger
from tests.inference.confinement_fixtures import index, mcp, token
from tests.server.admin_fixtures import Operator, build_operator_app, make_project

INSIDE = "def inside_function():\n    return 'the project's own code'\n"
MARK = "OUTSIDE-PAYROLL-LEDGER-7f3a"  # in every byte served from outside, it would show
OUTSIDE = f"def outside_payroll_ledger():\n    return '{MARK}'\n"
SWAPS = 3000  # at least this many exchanges during every race


def race_project(tmp: Path) -> tuple[Path, Path]:
    """The project (`sub/inside.py` real, `lnk` a link to the outside folder, whose `inside.py`
    and `stolen.py` carry MARK) and the outside folder."""
    root = make_project(tmp / "project")
    (root / "sub").mkdir()
    (root / "sub" / "inside.py").write_text(INSIDE)
    outside = tmp / "outside"
    outside.mkdir()
    (outside / "inside.py").write_text(OUTSIDE)
    (outside / "stolen.py").write_text(OUTSIDE)
    (root / "lnk").symlink_to(outside)
    return root, outside


def swapper_for(root: Path, tmp: Path) -> Swapper:
    """The swapper of `sub` and `lnk`, or a skip saying why this kernel or filesystem cannot
    exchange them."""
    try:
        exchange = exchanger()
        a, b = os.fsencode(root / "sub"), os.fsencode(root / "lnk")
        exchange(a, b)
        exchange(a, b)
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EINVAL, errno.EPERM, errno.EOPNOTSUPP):
            pytest.skip(
                f"renameat2(RENAME_EXCHANGE) is refused here ({exc.strerror}): the race "
                f"cannot be run on this kernel or filesystem ({tmp})"
            )
        raise
    return Swapper(root / "sub", root / "lnk", control=tmp / "swaps")


async def race(
    swapper: Swapper,
    step: Callable[[], Awaitable[None]],
    *,
    rounds: int,
    seconds: float,
    enough: Callable[[], bool] = lambda: True,
) -> int:
    """`step` again and again until `rounds` are done, SWAPS exchanges happened and the caller
    saw `enough`, or `seconds` passed; the rounds done."""
    deadline = time.monotonic() + seconds
    done = 0
    while (done < rounds or swapper.swaps < SWAPS or not enough()) and time.monotonic() < deadline:
        await step()
        done += 1
    return done


async def test_the_walk_read_one_and_the_file_tools_never_serve_a_folder_swapped_for_a_link(tmp_path):
    root, _ = race_project(tmp_path)
    served: list[str] = []
    refused: list[str] = []

    async def step() -> None:
        result = walk(root)
        for source in result.files:
            assert MARK not in source.text, f"{source.path} was read from outside the project"
            served.append(source.path)
        for rel in ("sub/inside.py", "lnk/inside.py", "sub/stolen.py", "lnk/stolen.py"):
            try:
                source = read_one(root, rel)
            except ReadRefused as exc:
                refused.append(exc.reason)
                continue
            assert MARK not in source.text, f"read_one({rel}) read from outside the project"
            assert source.text == INSIDE
            served.append(rel)
        tools = ProjectTools(root)  # a new one each round: it keeps its grep walk
        for name, args in (
            ("read_file", {"path": "sub/inside.py"}),
            ("list_dir", {"path": "sub"}),
            ("read_file", {"path": "lnk/inside.py"}),
            ("list_dir", {"path": "lnk"}),
            ("grep", {"pattern": "def "}),
        ):
            shown = await tools.run(name, args)
            assert MARK not in shown.text and "stolen.py" not in shown.text, (name, args, shown)

    with swapper_for(root, tmp_path) as swapper:
        rounds = await race(swapper, step, rounds=1000, seconds=30)
    assert swapper.swaps >= SWAPS, f"only {swapper.swaps} swaps in {rounds} rounds"
    assert rounds >= 300, f"only {rounds} rounds in the time given"
    # The race was real: the folder was read under both of its names, and refused as a link.
    assert {"sub/inside.py", "lnk/inside.py"} <= set(served)
    assert not any(path.endswith("stolen.py") for path in served)
    assert "symlink" in refused


@pytest.mark.slow
async def test_the_server_never_indexes_nor_reads_a_folder_swapped_for_a_link(tmp_path: Path):
    root, _ = race_project(tmp_path)
    data = tmp_path / "data"
    app = build_operator_app(data, settings=Settings(data_dir=data, watch=False))
    async with serve_in_loop(app) as url:
        op = Operator(url, app, data, tmp_path)
        assert (await index(op, root, "race"))["state"] == "done"
        reader = await token(op, "reader", ["race"])
        store = app.state.service.store
        states: list[str] = []
        async with mcp(url, reader) as client:

            async def step() -> None:
                job = await index(op, root, "race")
                assert job["state"] == "done", job
                for table in ("code", "docs"):
                    for entry in store.manifest("race", table):
                        assert "stolen.py" not in entry.path
                        for chunk in store.chunks("race", table, path=entry.path):
                            assert MARK not in chunk.text, f"{entry.path} indexed from outside"
                for rel in ("sub/inside.py", "lnk/inside.py") * 2:
                    read = await client.call_tool("read_code", {"project": "race", "path": rel})
                    assert MARK not in json.dumps([c.model_dump() for c in read.content])
                    if not read.is_error:
                        # "changed" would mean the file compared was not the project's.
                        states.append(read.structured_content["on_disk"])
                found = await client.call_tool(
                    "search_code", {"query": "outside payroll ledger", "project": "race", "k": 20}
                )
                assert not found.is_error and MARK not in json.dumps(found.structured_content)

            with swapper_for(root, tmp_path) as swapper:
                # A round whose walk met the folder as a link indexes nothing of it, and a
                # read_code that meets it so on any of its steps is refused (most are): go on
                # until some read compared the file on disk.
                # Bounded at 4 minutes: on a loaded machine most reads meet the link (a run
                # under load saw one read compare in 60 s); an idle one gets there in a few
                # rounds and stops.
                rounds = await race(swapper, step, rounds=8, seconds=240, enough=lambda: len(states) >= 2)
    assert swapper.swaps >= SWAPS, f"only {swapper.swaps} swaps in {rounds} rounds"
    assert rounds >= 8, f"only {rounds} rounds in the time given"
    assert len(states) >= 2 and "changed" not in states, states


def test_a_walk_holds_no_descriptor_after_it_and_reads_below_the_held_chain(tmp_path):
    root = make_project(tmp_path / "deep")
    folder = root
    for _ in range(tree_mod.HELD + 8):  # deeper than the chain of folders a tree keeps open
        folder = folder / "d"
        folder.mkdir()
    (folder / "bottom.py").write_text(INSIDE)
    deepest = "/".join(["d"] * (tree_mod.HELD + 8)) + "/bottom.py"
    open_before = len(os.listdir("/proc/self/fd"))
    assert deepest in {f.path for f in walk(root)}
    assert read_one(root, deepest).text == INSIDE
    listed = walker.survey(root)
    assert [c.rel for c in listed.candidates if c.rel == deepest]
    listed.close()
    assert len(os.listdir("/proc/self/fd")) == open_before


def test_a_system_that_cannot_open_beneath_a_folder_gets_a_clear_error(tmp_path, monkeypatch):
    root = make_project(tmp_path / "p")
    monkeypatch.setattr(os, "supports_dir_fd", set())
    with pytest.raises(WalkUnsupported) as caught:
        walk(root)
    message = str(caught.value)
    assert "os.open(dir_fd=)" in message and "without following symbolic links" in message
    assert "Run Fathom on Linux" in message


def test_a_survey_read_later_reads_only_from_the_root_it_listed(tmp_path):
    """Files are read long after the listing (an index job streams them): the root is opened
    again then, and must be the very folder that was listed, not what stands at its path now."""
    root = make_project(tmp_path / "p")
    listed = walker.survey(root)
    app = next(c for c in listed.candidates if c.rel == "app.py")
    assert listed.read(app) is not None
    listed.close()
    assert listed.read(app) is not None  # opened again: the same folder
    listed.close()
    root.rename(tmp_path / "moved")
    impostor = tmp_path / "p"
    impostor.mkdir()
    (impostor / "app.py").write_text(OUTSIDE)
    assert listed.read(app) is None
    assert listed.result.skipped["unreadable"] == 1
