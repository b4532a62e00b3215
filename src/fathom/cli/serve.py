"""`fathom mcp` and `fathom serve`: the MCP tools for one machine, over stdio or streamable HTTP.

What it owns: the two commands' options, `fathom serve`'s token (issued once and shown once, the
operator's own from a file or the environment, or none under `--no-auth` on loopback only), and
what both do at start: load the encoder in the background (`Fathom.warm_up`), so the first
search does not wait for it, with calls that come earlier waiting and saying so
(`server.warm`); and, for `fathom serve`, write the run file (`server.local`) through which
the same user's `fathom search` answers with this warm process.

What it refuses: any tool logic (`server.mcp_tools`), and printing anything but MCP frames on
stdout under `fathom mcp`. It is attached to the `fathom` app by `register`, which hands it the
CLI's consoles and the per-invocation settings and service.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from fathom.errors import ConfigError, FathomError

if TYPE_CHECKING:
    from fathom.config import Settings
    from fathom.service import Fathom

SERVER_PORT = 8765  # `fathom server`'s default (fathom.server.__main__)
SERVE_PORT = 8766  # `fathom serve`'s: both can run on one machine with their defaults

console: Console
err_console: Console
settings_of: Callable[[typer.Context], Settings]
fathom_of: Callable[[typer.Context], Fathom]
run: Callable[[Any], Any]


def register(
    app: typer.Typer,
    *,
    out: Console,
    err: Console,
    settings: Callable[[typer.Context], Settings],
    service: Callable[[typer.Context], Fathom],
    runner: Callable[[Any], Any],
) -> None:
    """Attach `mcp` and `serve` to `app`, with the CLI's consoles, settings, service and runner."""
    global console, err_console, settings_of, fathom_of, run
    console, err_console, settings_of, fathom_of, run = out, err, settings, service, runner
    app.command()(serve)
    app.command()(mcp)
    app.command(hidden=True)(daemon)
    app.command()(status)


NO_WATCH_HELP = (
    "Do not watch the projects' folders (their indexes then change only when "
    "re-indexed). FATHOM_WATCH=0 does the same."
)


def _watching(ctx: typer.Context, no_watch: bool) -> bool:
    return not no_watch and settings_of(ctx).watch


NO_AUTH_ALLOWS = (
    "any local user of this machine can search and index with your read rights: every project "
    "in the data dir, and any folder you can read"
)


class NoAuthRefused(ConfigError):
    """`fathom serve --no-auth` on an address beyond loopback: anyone who can reach it would act
    with the serving user's read rights."""

    def __init__(self, host: str):
        self.host = host
        super().__init__(
            f"refusing --no-auth on {host}: without a token anyone who can reach that address could "
            f"read, and index, code on this machine. --no-auth is for 127.0.0.1 (or ::1) only; on "
            f"{host} drop --no-auth and clients send the token `fathom serve` prints"
        )


def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help=f"TCP port (`fathom server` uses {SERVER_PORT}).")] = SERVE_PORT,
    no_watch: Annotated[bool, typer.Option("--no-watch", help=NO_WATCH_HELP)] = False,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            envvar="FATHOM_MCP_TOKEN_FILE",
            show_default=False,
            help="A file holding the token clients must send (else FATHOM_MCP_TOKEN; neither: one issued at "
            "the first start and printed once).",
        ),
    ] = None,
    rotate_token: Annotated[
        bool,
        typer.Option(
            "--rotate-token",
            help="Replace the issued token with a fresh one, printed once (the old one stops working).",
        ),
    ] = False,
    no_auth: Annotated[
        bool,
        typer.Option(
            "--no-auth", help=f"Serve without a token, on a loopback address only: {NO_AUTH_ALLOWS}."
        ),
    ] = False,
) -> None:
    """Serve the MCP tools over streamable HTTP (at /mcp), keeping indexes in sync.

    Clients send a token, on loopback too: printed once at the first start, with a ready client setup.

    The served projects' indexes follow their files as they change (unless --no-watch)."""
    from fathom import logsafe
    from fathom.server.connections import listen
    from fathom.server.local import RunFile, local_routes, local_url, serve_with_run_file
    from fathom.server.mcp_http import standalone_app
    from fathom.server.mcp_tools import build_mcp_server
    from fathom.server.warm import wait_for_encoder

    logsafe.install()  # what uvicorn and the service log carries no token, key or JWT (`logsafe`)
    given = mcp_token(token_file)
    _check_serve_auth(host, given, no_auth=no_auth, rotate_token=rotate_token)
    settings = settings_of(ctx)
    # Bound before a token is issued: a start that cannot listen leaves nothing behind.
    try:
        sock = listen(host, port)
    except OSError as exc:
        raise FathomError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}. Is another server running "
            f"there? Stop it, or choose another --port. No token was issued."
        ) from None
    try:
        fathom = fathom_of(ctx)
        auth = _serve_token(
            settings,
            f"http://{client_host(host)}:{port}/mcp",
            given,
            token_file,
            no_auth=no_auth,
            rotate_token=rotate_token,
        )
        server = build_mcp_server(fathom)
        wait_for_encoder(server, fathom)
        run_file = RunFile(settings.data_dir, local_url(host, port), kind="serve")
        mcp_app = standalone_app(
            server,
            token=given,
            auth=auth,
            host=host,
            allowed_hosts=settings.allowed_host_list(),
            on_start=fathom.start_watching if _watching(ctx, no_watch) else None,
            local=run_file,
            routes=local_routes(lambda: fathom, run_file),
        )
    except BaseException:
        sock.close()
        raise
    err_console.print(
        f"fathom MCP (streamable HTTP) on http://{host}:{port}/mcp"
        + (" (no token asked for)" if no_auth else " (bearer token required)")
    )
    sys.stdout.flush()
    warm_up(fathom)
    # The team server's connection bounds: a header timeout, a connection cap, and no
    # forwarded address believed.
    from fathom.server.connections import ConnectionLimits, uvicorn_config

    # A client's open stream (an MCP GET) does not hold a Ctrl-C or SIGTERM up for longer than
    # the stop's grace.
    config = uvicorn_config(
        mcp_app,
        host=host,
        port=port,
        limits=ConnectionLimits.of(settings),
        log_level="warning",
        timeout_graceful_shutdown=settings.stop_grace_s,
    )

    def said_stopped(signal_name: str) -> None:  # a stop is said as one, never as an interrupted index
        err_console.print(
            Text(f"fathom serve: stopped by {signal_name}; the indexes keep what was written", style="dim")
        )

    try:
        serve_with_run_file(
            config, sock, run_file, said_stopped
        )  # the run file is written while it serves, closed on any stop
    except KeyboardInterrupt:  # Ctrl-C, raised again by uvicorn once it has shut down: already said
        # Ctrl-C may land before uvicorn took the signals over, where no watchdog bounds the
        # exit: whatever it then waits on (the encoder's warm-up thread) ends within the grace.
        from fathom.stopping import bound_exit

        bound_exit(signal.SIGINT, settings.stop_grace_s)
        raise typer.Exit(130) from None


def _check_serve_auth(host: str, given: str | None, *, no_auth: bool, rotate_token: bool) -> None:
    """`fathom serve`'s token flags, refused before anything is bound or issued."""
    from fathom.config import is_loopback

    if no_auth and not is_loopback(host):
        raise NoAuthRefused(host)
    if no_auth and given:
        raise ConfigError(
            "--no-auth and a token (FATHOM_MCP_TOKEN or --token-file) were both given: drop one of them"
        )
    if rotate_token and (no_auth or given):
        raise ConfigError(
            "--rotate-token replaces the token `fathom serve` issued; with --no-auth, "
            "FATHOM_MCP_TOKEN or --token-file there is none to replace"
        )


def _serve_token(
    settings: Any, url: str, given: str | None, token_file: Path | None, *, no_auth: bool, rotate_token: bool
) -> Any:
    """The issued token `fathom serve` checks (None: the operator's own, or --no-auth), after
    telling the operator how clients reach the server with it."""
    import shlex

    from fathom.cli.admin import print_mcp_client, print_whole
    from fathom.server.mcp_http import ServeToken

    auth: Any = None
    if given:  # the operator's own: shown as where it is, never printed
        print_mcp_client(
            url, "$FATHOM_MCP_TOKEN" if token_file is None else f"$(cat {shlex.quote(str(token_file))})"
        )
    elif not no_auth:
        auth = ServeToken(settings.data_dir)
        if rotate_token or not auth.configured:
            issued = auth.replace() if rotate_token else auth.issue()
            print_whole(
                f"MCP token ({'rotated; ' if rotate_token else ''}shown once; only its hash is kept): "
                f"{issued}"
            )
            print_mcp_client(url, issued)
        else:
            console.print(
                "MCP clients send the token this data dir's first `fathom serve` printed (only its "
                "hash is kept); `fathom serve --rotate-token` prints a new one"
            )
    else:
        err_console.print(
            Text(f"warning: --no-auth: no token is asked for; {NO_AUTH_ALLOWS}", style="yellow")
        )
    return auth


def client_host(host: str) -> str:
    """The name a client uses for a server listening on `host`: this machine's name for a
    wildcard address, brackets around an IPv6 literal."""
    import socket

    from fathom.server.mcp_http import WILDCARD_HOSTS

    if host in WILDCARD_HOSTS:
        return socket.getfqdn()
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def mcp_token(token_file: Path | None) -> str | None:
    """The token `fathom serve` requires: from `--token-file` (FATHOM_MCP_TOKEN_FILE), else
    FATHOM_MCP_TOKEN; None when neither is set."""
    if token_file is not None:
        try:
            token = token_file.expanduser().read_text().strip()
            mode = token_file.expanduser().stat().st_mode
        except OSError as exc:
            raise ConfigError(f"cannot read the token file {token_file}: {exc.strerror or exc}") from None
        if not token:
            raise ConfigError(f"the token file {token_file} is empty: put the token clients must send in it")
        if mode & 0o077:
            err_console.print(
                f"warning: {token_file} can be read by other users of this machine; `chmod 600 {token_file}`"
            )
    else:
        from fathom.config import Settings

        token = Settings.secret(Settings().mcp_token) or ""
    if not token:
        return None
    from fathom.server.token_strength import MAKE_ONE, check_chosen_token

    setting = "FATHOM_MCP_TOKEN" if token_file is None else f"the token in {token_file}"
    if any(c.isspace() for c in token):
        raise ConfigError(
            f"{setting} holds a space: a token is one word; use a random one, e.g. `{MAKE_ONE}`"
        )
    # Short, repetitive or word-made tokens are refused as the server's are (`server.token_strength`).
    return check_chosen_token(setting, token, instead=None if token_file is None else "drop --token-file")


def mcp(
    ctx: typer.Context,
    no_watch: Annotated[bool, typer.Option("--no-watch", help=NO_WATCH_HELP)] = False,
    in_process: Annotated[
        bool,
        typer.Option(
            "--in-process",
            help="Serve in this process (its own encoder and watchers) instead of through the "
            "background Fathom all sessions share. FATHOM_MCP_IN_PROCESS=1 does the same.",
        ),
    ] = False,
) -> None:
    """Serve the MCP tools over stdio (for an MCP host that spawns fathom).

    Sessions share one background Fathom per user and data dir (started by the first, stopped
    after FATHOM_DAEMON_IDLE_MINUTES without one); in this process when none can start, or with
    --in-process.
    The served projects' indexes follow their files as they change (unless --no-watch)."""
    from fathom import logsafe

    logsafe.install()  # stderr is the MCP host's log: no token, key or JWT reaches it (`logsafe`)
    settings = settings_of(ctx)
    if not (in_process or settings.mcp_in_process) and _bridged(settings, watch=_watching(ctx, no_watch)):
        return
    _mcp_in_process(ctx, no_watch)


def _bridged(settings: Settings, *, watch: bool) -> bool:
    """Serve this session through the data dir's daemon (started if none runs); False, said on
    stderr, when none can be had: the caller serves in-process. The same session as `fathom
    mcp`'s fast path serves (`cli.sessions`), here with the full app's consoles."""
    from fathom.cli.sessions import serve_bridged

    code = serve_bridged(
        settings, watch=watch, say=lambda line, style: err_console.print(Text(line, style=style))
    )
    if code is None:
        return False
    if code:
        raise typer.Exit(code)
    return True


def _mcp_in_process(ctx: typer.Context, no_watch: bool) -> None:
    from fathom.server.mcp_tools import build_mcp_server
    from fathom.server.warm import wait_for_encoder

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    fathom = fathom_of(ctx)
    watching = _watching(ctx, no_watch)

    async def main() -> None:
        warm_up(fathom)  # before the host's first call, which then finds the encoder loaded
        if watching:
            await fathom.start_watching()
        server = build_mcp_server(fathom)
        wait_for_encoder(server, fathom)
        await server.run_stdio_async()

    from fathom.stopping import Stopped, run_stoppable

    try:
        run_stoppable(main(), grace_s=settings_of(ctx).stop_grace_s)
    except Stopped as exc:  # the host (or a person) ended the session: a clean stop
        err_console.print(Text(f"fathom mcp: {exc}; the indexes keep what was written", style="dim"))


def warm_up(fathom: Fathom) -> None:
    """Start loading the encoder in the background, saying so on stderr (the host's log for
    `fathom mcp`), and again when it is loaded."""
    from fathom.cli.sessions import warm_up as start

    start(fathom, lambda line: err_console.print(Text(line, style="dim")))


def daemon(
    ctx: typer.Context,
    no_watch: Annotated[bool, typer.Option("--no-watch", help=NO_WATCH_HELP)] = False,
) -> None:
    """The background Fathom `fathom mcp` sessions share (started by them; see `fathom status`)."""
    from fathom import logsafe
    from fathom.cli.sessions import run_daemon

    # A bridge spawns it without the command line (`cli.launch`); this is a person's start.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logsafe.install()  # its log is a file in the data dir: no token, key or JWT reaches it
    try:
        run_daemon(
            settings_of(ctx),
            fathom_of(ctx),
            watching=_watching(ctx, no_watch),
            say=lambda line: err_console.print(Text(line, style="dim")),
        )
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def status(ctx: typer.Context) -> None:
    """Show the background Fathom this data dir's `fathom mcp` sessions share, if one runs."""
    from fathom.server.bridge import daemon_status

    data_dir = settings_of(ctx).data_dir
    info = daemon_status(data_dir)
    if info is None:
        console.print(f"no background Fathom runs for {data_dir}: the next `fathom mcp` starts one")
        return
    console.print(f"background Fathom for {data_dir}")
    console.print(f"  pid           {info.get('pid')}")
    console.print(f"  url           {info.get('url')}/mcp")
    if "answering" in info:
        console.print(f"  answering     {info['answering']}")
        return
    timeout_min = float(info.get("idle_timeout_s") or 0) / 60
    console.print(f"  sessions      {info.get('sessions')}")
    console.print(f"  requests      {info.get('requests')}")
    console.print(f"  idle for      {float(info.get('idle_for_s') or 0):.0f} s")
    console.print(f"  idle timeout  {timeout_min:g} min (FATHOM_DAEMON_IDLE_MINUTES)")
