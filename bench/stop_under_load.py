"""Stopping under load: the stop tests run again and again with busy cores beside them.

    .venv/bin/python bench/stop_under_load.py [--runs 50] [--hogs 2] [-k watch]

Ctrl-C or SIGTERM must end `fathom watch`, `fathom mcp` and `fathom serve` cleanly whatever
they are doing (`tests/server/test_stopping.py` signals each while it starts, loads the model,
syncs, indexes and idles). A stop that waits on something it cannot cancel shows up only now
and then, and more often on a loaded machine, so this runs those tests `--runs` times in a
row with `--hogs` processes spinning on the CPU beside them, and prints each run's outcome,
the failures (with pytest's summary), and the slowest test of each run. Everything runs on
this machine and stops by itself: each pytest run is bounded (`--run-timeout`).
"""

from __future__ import annotations

import argparse
import multiprocessing
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _spin() -> None:
    while True:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--hogs", type=int, default=2, help="busy processes beside the tests")
    parser.add_argument("-k", default="", help="pytest -k expression (default: every stop test)")
    parser.add_argument("--run-timeout", type=float, default=900.0)
    args = parser.parse_args()

    hogs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    failed = 0
    started = time.monotonic()
    try:
        for run in range(1, args.runs + 1):
            argv = [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "--durations=1",
                "tests/server/test_stopping.py",
                *(["-k", args.k] if args.k else []),
            ]
            t0 = time.monotonic()
            try:
                done = subprocess.run(
                    argv, cwd=ROOT, capture_output=True, text=True, timeout=args.run_timeout
                )
                out, code = done.stdout, done.returncode
            except subprocess.TimeoutExpired as exc:
                out, code = str(exc.stdout or ""), -1
            summary = (out.strip().splitlines() or ["(no output)"])[-1]
            slowest = re.search(r"^([\d.]+)s call\s+(\S+)", out, re.M)
            print(
                f"run {run:3d}: {summary}  ({time.monotonic() - t0:.0f} s"
                + (f"; slowest {slowest[2].split('::')[-1]} {slowest[1]} s" if slowest else "")
                + ")",
                flush=True,
            )
            if code != 0:
                failed += 1
                print(
                    "\n".join(
                        line
                        for line in out.splitlines()
                        if line.startswith("FAILED") or "did not exit" in line or "forcing it" in line
                    )
                )
    finally:
        for hog in hogs:
            hog.terminate()
    print(
        f"{args.runs - failed} of {args.runs} runs passed with {args.hogs} busy processes "
        f"beside them, in {(time.monotonic() - started) / 60:.1f} min"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
