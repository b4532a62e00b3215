"""`python -m fathom.server` (`fathom server`): serve the fathom app with uvicorn (127.0.0.1 by
default).

The port is bound first. Only then, on the first start, are a sidecar join token and an admin
token issued (when none is configured) and each printed once; `--rotate-admin-token` and
`--rotate-join-token` replace every token of that kind with a fresh one, printed once, and the
old ones stop working. So a start that cannot listen (a busy port) prints no token, keeps none,
and exits with the reason. Only the tokens' hashes are kept under the data dir; rotations are
written to the audit log (never the token). Tokens chosen in the environment (FATHOM_ADMIN_TOKEN,
FATHOM_JOIN_TOKEN, FATHOM_METRICS_TOKEN) shorter than 24 characters stop the start with the reason.

While it runs, `local_server.json` in the data dir tells the same user's `fathom search` where
it is (`server.local`), so the CLI answers with this server's warm encoder.

uvicorn runs with the server's connection bounds (`server.connections`): a header timeout, a
connection cap, and forwarded addresses believed only from `--forwarded-allow-ips`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from fathom.commandline import LogFormat, LogLevel, run_command, setup_logging
from fathom.config import Settings
from fathom.errors import ConfigError, failure_of
from fathom.server.connections import listen


def server(
    ctx: typer.Context,
    host: Annotated[
        str,
        typer.Option(
            envvar="FATHOM_HOST",
            show_envvar=True,
            help="The address to listen on; beyond loopback, every client needs a token.",
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(envvar="FATHOM_PORT", show_envvar=True, min=0, max=65535, help="The port to listen on."),
    ] = 8765,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            envvar="FATHOM_DATA_DIR",
            show_envvar=True,
            show_default=False,
            help="Where indexes, tokens' hashes and state live (default ~/.fathom).",
        ),
    ] = None,
    log_level: LogLevel = "INFO",
    log_format: LogFormat = "text",
    no_watch: Annotated[
        bool,
        typer.Option(
            "--no-watch",
            help="Do not watch the projects' folders: their indexes then change only when re-indexed "
            "(FATHOM_WATCH=0 does the same).",
        ),
    ] = False,
    rotate_admin_token: Annotated[
        bool,
        typer.Option(
            "--rotate-admin-token",
            help="Replace every admin token with a fresh one, printed once (the old ones stop working); with "
            "FATHOM_ADMIN_TOKEN set, that one becomes the only admin token.",
        ),
    ] = False,
    rotate_join_token: Annotated[
        bool,
        typer.Option(
            "--rotate-join-token",
            help="Replace every sidecar join token with a fresh one, printed once (host tokens and approvals "
            "stay); with FATHOM_JOIN_TOKEN set, that one becomes the only join token.",
        ),
    ] = False,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            "--forwarded-allow-ips",
            envvar="FATHOM_FORWARDED_ALLOW_IPS",
            show_envvar=True,
            show_default=False,
            help="The reverse proxy (addresses, comma-separated) whose X-Forwarded-For is believed; by default "
            "none is: the client is the TCP peer. Name only a proxy that overwrites that header.",
        ),
    ] = None,
) -> None:
    """Run the fathom server: admin API, sidecar WebSocket, MCP at /mcp, dashboard."""
    root = ctx.find_root().obj or {}
    data_dir = data_dir or root.get("data_dir")  # `fathom --data-dir X server`
    raise typer.Exit(
        serve(
            host,
            port,
            data_dir=data_dir,
            log_level=log_level,
            log_format=log_format,
            watch=not no_watch,
            forwarded_allow_ips=forwarded_allow_ips,
            rotate_admin=rotate_admin_token,
            rotate_join=rotate_join_token,
        )
    )


def serve(
    host: str,
    port: int,
    *,
    data_dir: Path | None = None,
    log_level: str = "INFO",
    log_format: str = "text",
    watch: bool = True,
    forwarded_allow_ips: str | None = None,
    rotate_admin: bool = False,
    rotate_join: bool = False,
) -> int:
    """Bind, then build the app and issue tokens, then serve until stopped; the exit code."""
    from fathom.fleet.transport import uvicorn_websocket_options
    from fathom.server.connections import ConnectionLimits, uvicorn_config
    from fathom.server.local import serve_with_run_file

    setup_logging(log_level, log_format)
    # Bound before any token is issued: a start that cannot listen leaves nothing behind.
    try:
        sock = listen(host, port)
    except OSError as exc:
        print(
            f"fathom server: cannot listen on {host}:{port}: {exc.strerror or exc}. Is another server "
            f"running there? Stop it, or choose another --port. No token was issued.",
            file=sys.stderr,
        )
        return 1
    try:
        from fathom.server.app import create_app

        settings = Settings()  # a malformed FATHOM_* variable is a ConfigError: the one line below
        settings = settings.model_copy(
            update={
                "data_dir": data_dir or settings.data_dir,
                "host": host,
                "port": port,
                "watch": settings.watch and watch,
            }
        )
        if forwarded_allow_ips is not None:
            settings = settings.model_copy(update={"forwarded_allow_ips": forwarded_allow_ips})
        app = create_app(settings)
        run_file = open_run_file(app, settings, host, port)
        for line in issue_tokens(app, settings, rotate_admin=rotate_admin, rotate_join=rotate_join):
            print(line, flush=True)
    except Exception as exc:
        # A full disk or a damaged state file at start is one line naming the fix, not a traceback.
        failure = failure_of(exc)
        if failure is None:
            raise
        sock.close()
        print(f"error: {' '.join(str(failure).split())}", file=sys.stderr, flush=True)
        return 2 if isinstance(failure, ConfigError) else 1
    print(f"fathom server on http://{host}:{port} (data dir {settings.data_dir})", flush=True)
    config = uvicorn_config(
        app,
        host=host,
        port=port,
        limits=ConnectionLimits.of(settings),
        forwarded_allow_ips=settings.forwarded_allow_ips,
        log_level=log_level.lower(),
        log_config=None,
        timeout_graceful_shutdown=settings.stop_grace_s,
        **uvicorn_websocket_options(),
    )
    serve_with_run_file(config, sock, run_file)  # the run file is written while it serves, closed on any stop
    return 0


def open_run_file(app: Any, settings: Settings, host: str, port: int) -> Any:
    """The `/local/` routes for the same user's CLI (`server.local`), behind this run's token."""
    from fathom.server.local import RunFile, local_routes, local_url

    run_file = RunFile(settings.data_dir, local_url(host, port), kind="server")
    app.state.parts.access.local = run_file
    app.router.routes.extend(local_routes(lambda: app.state.service, run_file))
    return run_file


def issue_tokens(
    app: object, settings: Settings, *, rotate_admin: bool = False, rotate_join: bool = False
) -> list[str]:
    """The lines to print: each token issued now (first start or rotation), once."""
    from fathom.server.audit import COMMAND_LINE

    state = app.state  # type: ignore[attr-defined]  # the FastAPI app, passed as object
    hub_auth, admin_auth, audit = state.hub.auth, state.admin_auth, state.audit
    lines = []
    if rotate_join:
        issued = hub_auth.replace_join_tokens(settings.secret(settings.join_token))
        audit.record(COMMAND_LINE, "rotated the sidecar join token (every earlier join token stops working)")
        lines.append(
            f"sidecar join token (rotated; shown once): {issued.token}"
            if issued
            else "sidecar join token rotated: FATHOM_JOIN_TOKEN is now the only join token"
        )
    elif not hub_auth.has_join_token:
        lines.append(f"sidecar join token (shown once): {hub_auth.issue_join_token().token}")
    if rotate_admin:
        token = admin_auth.replace(settings.secret(settings.admin_token))
        audit.record(COMMAND_LINE, "rotated the admin token (every earlier admin token stops working)")
        lines.append(
            f"admin token (rotated; shown once): {token}"
            if token
            else "admin token rotated: FATHOM_ADMIN_TOKEN is now the only admin token"
        )
    elif not admin_auth.configured:
        lines.append(f"admin token (shown once): {admin_auth.issue()}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """`python -m fathom.server [OPTIONS]`: the same command as `fathom server`."""
    return run_command(server, argv, prog="python -m fathom.server")


if __name__ == "__main__":
    sys.exit(main())
