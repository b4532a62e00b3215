"""`python -m fathom.devtools.localserver --port N --model NAME`: serve it on 127.0.0.1."""

from __future__ import annotations

import argparse

import uvicorn

from fathom.devtools.localserver.app import LocalServerConfig, create_app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m fathom.devtools.localserver",
        description="A scripted local LLM / reranker server for development and tests (never production).",
    )
    parser.add_argument("--port", type=int, default=8798)
    parser.add_argument(
        "--model", action="append", default=[], help="a served model name (repeatable; default local-llm)"
    )
    parser.add_argument("--context", type=int, default=8192, help="context window in tokens (default 8192)")
    parser.add_argument("--no-rerank", action="store_true", help="offer no /v1/rerank, /rerank, /info")
    args = parser.parse_args(argv)
    config = LocalServerConfig(
        models=tuple(args.model) or ("local-llm",), context=args.context, rerank=not args.no_rerank
    )
    # Loopback only, on purpose: the control API has no auth and must never face a network.
    print(f"scripted local server: base URL http://127.0.0.1:{args.port}/v1, control at /control", flush=True)
    uvicorn.run(
        create_app(config),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        # A request held by a delay must not hold a stopping server for its whole delay.
        timeout_graceful_shutdown=1,
    )


if __name__ == "__main__":
    main()
