"""`python -m fathom.server` (`fathom server`): serve the fathom app with uvicorn (127.0.0.1 by
default).

The port is bound first. Only then, on the first start, are a sidecar join token and an admin
token issued (when none is configured) and each printed once; `--rotate-admin-token` and
`--rotate-join-token` replace every token of that kind with a fresh one, printed once, and the
old ones stop working. So a start that cannot listen (a busy port) prints no token, keeps none,
and exits with the reason. Only the tokens' hashes are kept under the data dir; rotations are
written to the audit log (never the token).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

import uvicorn

from fathom import logsafe
from fathom.config import Settings
from fathom.errors import ConfigError, failure_of
from fathom.fleet.protocol import MAX_FRAME_BYTES


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port) and listening, as uvicorn would make it; OSError if the
    address is taken or not this machine's."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def main(argv: list[str] | None = None) -> int:
    settings = Settings()
    ap = argparse.ArgumentParser(prog="python -m fathom.server", description="Run the fathom server.")
    ap.add_argument("--host", default=settings.host, help="bind address (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=settings.port)
    ap.add_argument("--data-dir", type=Path, default=settings.data_dir)
    ap.add_argument("--log-level", default=os.environ.get("FATHOM_LOG_LEVEL", "INFO"))
    ap.add_argument("--log-format", choices=logsafe.LOG_FORMATS, default=os.environ.get("FATHOM_LOG_FORMAT", "text"),
                    help="text lines, or one JSON object per line for a log collector (default text)")
    ap.add_argument("--no-watch", action="store_true",
                    help="do not watch the projects' folders: their indexes then change only "
                         "when re-indexed (FATHOM_WATCH=0 does the same)")
    ap.add_argument("--rotate-admin-token", action="store_true",
                    help="replace every admin token with a fresh one, printed once (the old ones stop working); "
                         "with FATHOM_ADMIN_TOKEN set, that one becomes the only admin token")
    ap.add_argument("--rotate-join-token", action="store_true",
                    help="replace every sidecar join token with a fresh one, printed once (host tokens and "
                         "approvals stay); with FATHOM_JOIN_TOKEN set, that one becomes the only join token")
    args = ap.parse_args(argv)
    logsafe.configure(args.log_level, args.log_format)
    settings = settings.model_copy(update={"data_dir": args.data_dir, "host": args.host, "port": args.port,
                                           "watch": settings.watch and not args.no_watch})
    # Bound before any token is issued: a start that cannot listen leaves nothing behind.
    try:
        sock = listen(args.host, args.port)
    except OSError as exc:
        print(f"fathom server: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}. Is another server "
              f"running there? Stop it, or choose another --port. No token was issued.", file=sys.stderr)
        return 1
    try:
        from fathom.server.app import create_app

        app = create_app(settings)
        for line in issue_tokens(app, rotate_admin=args.rotate_admin_token, rotate_join=args.rotate_join_token):
            print(line, flush=True)
    except Exception as exc:
        # A full disk or a damaged state file at start is one line naming the fix, not a traceback.
        failure = failure_of(exc)
        if failure is None:
            raise
        sock.close()
        print(f"error: {' '.join(str(failure).split())}", file=sys.stderr, flush=True)
        return 2 if isinstance(failure, ConfigError) else 1
    print(f"fathom server on http://{args.host}:{args.port} (data dir {args.data_dir})", flush=True)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level.lower(),
                            ws="websockets-sansio", ws_max_size=MAX_FRAME_BYTES + 4096, log_config=None)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def issue_tokens(app: object, *, rotate_admin: bool = False, rotate_join: bool = False) -> list[str]:
    """The lines to print: each token issued now (first start or rotation), once."""
    from fathom.server.audit import COMMAND_LINE

    state = app.state  # type: ignore[attr-defined]
    hub_auth, admin_auth, audit = state.hub.auth, state.admin_auth, state.audit
    lines = []
    if rotate_join:
        issued = hub_auth.replace_join_tokens(os.environ.get("FATHOM_JOIN_TOKEN") or None)
        audit.record(COMMAND_LINE, "rotated the sidecar join token (every earlier join token stops working)")
        lines.append(f"sidecar join token (rotated; shown once): {issued.token}" if issued else
                     "sidecar join token rotated: FATHOM_JOIN_TOKEN is now the only join token")
    elif not hub_auth.has_join_token:
        lines.append(f"sidecar join token (shown once): {hub_auth.issue_join_token().token}")
    if rotate_admin:
        token = admin_auth.replace(os.environ.get("FATHOM_ADMIN_TOKEN") or None)
        audit.record(COMMAND_LINE, "rotated the admin token (every earlier admin token stops working)")
        lines.append(f"admin token (rotated; shown once): {token}" if token else
                     "admin token rotated: FATHOM_ADMIN_TOKEN is now the only admin token")
    elif not admin_auth.configured:
        lines.append(f"admin token (shown once): {admin_auth.issue()}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
