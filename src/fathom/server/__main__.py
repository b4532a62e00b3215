"""`python -m fathom.server`: serve the fathom app with uvicorn (127.0.0.1 by default).

On first start it issues a sidecar join token and an admin token when none is configured and
prints each once; only their hashes are kept under the data dir.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import uvicorn

from fathom import logsafe
from fathom.config import Settings
from fathom.errors import ConfigError, failure_of
from fathom.fleet.protocol import MAX_FRAME_BYTES
from fathom.server.app import create_app


def main(argv: list[str] | None = None) -> int:
    settings = Settings()
    ap = argparse.ArgumentParser(prog="python -m fathom.server", description="Run the fathom server.")
    ap.add_argument("--host", default=settings.host, help="bind address (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=settings.port)
    ap.add_argument("--data-dir", type=Path, default=settings.data_dir)
    ap.add_argument("--log-level", default=os.environ.get("FATHOM_LOG_LEVEL", "INFO"))
    ap.add_argument("--no-watch", action="store_true",
                    help="do not watch the projects' folders: their indexes then change only "
                         "when re-indexed (FATHOM_WATCH=0 does the same)")
    args = ap.parse_args(argv)
    logsafe.install()
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = settings.model_copy(update={"data_dir": args.data_dir, "host": args.host, "port": args.port,
                                           "watch": settings.watch and not args.no_watch})
    try:
        app = create_app(settings)
        if not app.state.hub.auth.has_join_token:
            print(f"sidecar join token (shown once): {app.state.hub.auth.issue_join_token().token}", flush=True)
        if not app.state.admin_auth.configured:
            print(f"admin token (shown once): {app.state.admin_auth.issue()}", flush=True)
    except Exception as exc:
        # A full disk or a damaged state file at start is one line naming the fix, not a traceback.
        failure = failure_of(exc)
        if failure is None:
            raise
        print(f"error: {' '.join(str(failure).split())}", file=sys.stderr, flush=True)
        return 2 if isinstance(failure, ConfigError) else 1
    print(f"fathom server on http://{args.host}:{args.port} (data dir {args.data_dir})", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level.lower(),
                ws="websockets-sansio", ws_max_size=MAX_FRAME_BYTES + 4096, log_config=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
