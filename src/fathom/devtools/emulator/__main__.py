"""`python -m fathom.devtools.emulator --port N`: serve the emulator on 127.0.0.1."""

from __future__ import annotations

import argparse

import uvicorn

from fathom.devtools.emulator.app import create_app
from fathom.devtools.emulator.state import EmulatorConfig


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m fathom.devtools.emulator",
        description="OpenRouter emulator for development and tests (never production).",
    )
    parser.add_argument("--port", type=int, default=8799)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--remember",
        action="store_true",
        help="answer an embedding text already encoded (per encoder variant) from memory",
    )
    args = parser.parse_args(argv)
    # Loopback only, on purpose: the control API has no auth and must never face a network.
    print(f"OpenRouter emulator: base URL http://127.0.0.1:{args.port}/api/v1, control at /control")
    uvicorn.run(
        create_app(EmulatorConfig(seed=args.seed, remember=args.remember)),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
