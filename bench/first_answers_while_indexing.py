"""First answers while indexing: how soon a project's first index answers questions naming a
class or a file's subject, and what the answers say meanwhile.

    .venv/bin/python bench/first_answers_while_indexing.py [--path DIR] [--seconds 20]

A copy of rich's source (the `rich` package installed in the virtualenv, by default) is
indexed through a real `fathom mcp` stdio session (the MCP SDK's client, as a host does) in a
fresh data dir, with the usual model cache. From the moment `index_project` answers (t=0),
every question not yet answered is asked with `search_code(project=…, k=3)` once a second
until `--seconds`; the script prints when each first found its file in the top 3, the phase
the job was in then and the note the answer carried (a first index answers keyword-only from
its walked chunks until it is promoted). It then waits for the job to end and asks every
question once more: the hybrid answer, with no note.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from _common import machine, table  # noqa: E402

# A question, and the files (under rich/) any of which answers it.
QUESTIONS: list[tuple[str, tuple[str, ...]]] = [
    ("Console", ("console.py",)),
    ("progress bar columns", ("progress.py", "progress_bar.py")),
    ("syntax highlighting theme", ("syntax.py",)),
    ("Table rendering", ("table.py",)),
    ("Markdown rendering", ("markdown.py",)),
    ("pretty traceback", ("traceback.py",)),
    ("Panel border", ("panel.py",)),
    ("Tree guide lines", ("tree.py",)),
    ("logging handler", ("logging.py",)),
    ("Live display refresh", ("live.py",)),
    ("Prompt ask for input", ("prompt.py",)),
]


def rich_source() -> Path:
    import rich

    return Path(rich.__file__).parent


def session(data: Path, tmp: Path) -> Any:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    env = {
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", str(tmp)),  # the usual model cache
        "LOG": str(tmp / "mcp.log"),
        "PYTHONPATH": str(ROOT / "src"),
    }
    command = 'exec "$@" 2>"$LOG"'
    args = [
        "-c",
        command,
        "sh",
        sys.executable,
        "-m",
        "fathom.cli",
        "--data-dir",
        str(data),
        "mcp",
        "--in-process",
    ]
    return Client(StdioServerParameters(command="/bin/sh", args=args, env=env), read_timeout_seconds=600)


def found_in_top3(answer: dict[str, Any], files: tuple[str, ...]) -> bool:
    return any(Path(h["path"]).name in files for h in answer.get("results", [])[:3])


async def run(
    path: Path, seconds: float, tmp: Path
) -> tuple[list[list[str]], list[str], list[list[str]], float]:
    async with asyncio.timeout(1800), session(tmp / "data", tmp) as client:
        started = await client.call_tool("index_project", {"path": str(path), "project": "rich"})
        job = started.structured_content["job"]["id"]
        t0 = time.monotonic()
        first: dict[str, tuple[float, str, str]] = {}
        while (now := time.monotonic() - t0) <= seconds and len(first) < len(QUESTIONS):
            view = (
                await client.call_tool("index_status", {"project": "rich", "job": job})
            ).structured_content
            phase = view["job"]["phase"]
            for question, files in QUESTIONS:
                if question in first:
                    continue
                r = await client.call_tool("search_code", {"query": question, "project": "rich", "k": 3})
                answer = r.structured_content or {}
                if not r.is_error and found_in_top3(answer, files):
                    note = "; ".join(answer.get("notes") or []) or "(no note)"
                    first[question] = (time.monotonic() - t0, phase, note)
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - t0 - now)))  # asked once a second
        while True:
            view = (
                await client.call_tool("index_status", {"project": "rich", "job": job})
            ).structured_content
            if view["job"]["state"] in ("done", "failed", "cancelled"):
                break
            await asyncio.sleep(0.5)
        ended = time.monotonic() - t0
        during = [
            [
                q,
                f"{first[q][0]:.1f}" if q in first else f"not by {seconds:g}",
                first[q][1] if q in first else "-",
            ]
            for q, _ in QUESTIONS
        ]
        notes = sorted({first[q][2] for q in first})
        after = []
        for question, files in QUESTIONS:
            r = await client.call_tool("search_code", {"query": question, "project": "rich", "k": 3})
            answer = r.structured_content or {}
            after.append(
                [
                    question,
                    "yes" if found_in_top3(answer, files) else "no",
                    "; ".join(answer.get("notes") or []) or "-",
                ]
            )
        return during, notes, after, ended


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--path", type=Path, default=None, help="the folder to index (default: rich's source)"
    )
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        project = tmp / "rich"
        shutil.copytree(args.path or rich_source(), project, ignore=shutil.ignore_patterns("__pycache__"))
        files = sum(1 for p in project.rglob("*") if p.is_file())
        during, notes, after, ended = asyncio.run(run(project, args.seconds, tmp))
    print(machine())
    print(f"indexed {files} files; the job ended at t={ended:.1f} s")
    print(table(["question", "top 3 at (s)", "phase then"], during))
    print("notes the answers carried when first found:")
    for note in notes:
        print(f"  {note}")
    print(table(["question (after the job ended)", "top 3", "note"], after))


if __name__ == "__main__":
    main()
