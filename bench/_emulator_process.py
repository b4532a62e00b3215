"""An OpenRouter emulator answering with hashed vectors, in a process of its own.

    python bench/_emulator_process.py --width 64      # prints its port, serves until killed

For routing benchmarks (`_common.start_emulator_process`): the upstreams a contender is
measured against then share no interpreter (no GIL) with it, so the client under test and
three emulators do not take turns on one lock.
"""

from __future__ import annotations

import argparse
import sys

import _common as c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=64)
    args = ap.parse_args()
    c.use_hash_encoders(args.width)
    server = c._Server(None)
    server.start()
    print(server.port, flush=True)
    sys.stdin.read()  # until the parent closes our stdin (or dies)
    server.stop()


if __name__ == "__main__":
    main()
