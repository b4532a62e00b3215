"""`fathom sidecar`: the command that joins a host to a server's fleet, apart from the agent it
runs (`fathom.fleet.agent`), so that the CLI lists it without loading the agent, its wire
protocol and its backends: they load when the command runs.

API:
    sidecar(...)                       the typer command (`fathom sidecar`)
    join_token(on_argv, token_file)    the join or host token, from a file, the environment or argv
    main(argv) -> int                  `python -m fathom.fleet.command`
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer

from fathom.commandline import LogFormat, LogLevel, run_command, setup_logging
from fathom.config import Settings
from fathom.errors import ConfigError
from fathom.fleet.defaults import DEFAULT_INTERVAL_S


def sidecar(
    server: Annotated[
        str,
        typer.Option(
            help="The fleet server: wss://HOST[:PORT] (plain ws:// only to loopback).", show_default=False
        ),
    ],
    token: Annotated[
        str | None,
        typer.Option(
            show_default=False,
            help="A join token or host token; better in FATHOM_SIDECAR_TOKEN or a file (--token-file): on the "
            "command line every user of this host sees it in `ps`.",
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            envvar="FATHOM_SIDECAR_TOKEN_FILE",
            show_envvar=True,
            show_default=False,
            help="A file holding the join or host token.",
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option(show_default=False, help="This sidecar's name (default: the host name).")
    ] = None,
    serve: Annotated[
        list[str] | None,
        typer.Option(
            metavar="ROLE=BACKEND",
            show_default=False,
            help="What this host serves, repeatable: e.g. code-embedding=in-process, "
            "embedding=openai-compatible:http://127.0.0.1:8000/v1, reranker=tei:http://127.0.0.1:8080, "
            "reranker=in-process,model=/models/cross-encoder, "
            "rlm=openai-compatible:http://127.0.0.1:11434/v1,model=NAME.",
        ),
    ] = None,
    openrouter_url: Annotated[
        str | None,
        typer.Option(
            envvar="FATHOM_OPENROUTER_BASE_URL",
            show_envvar=True,
            show_default=False,
            help="The OpenRouter API base URL (default https://openrouter.ai/api/v1).",
        ),
    ] = None,
    no_cloud: Annotated[
        bool, typer.Option("--no-cloud", help="Never serve OpenRouter routes from this host.")
    ] = False,
    heartbeat: Annotated[float, typer.Option(min=0.1, help="Seconds between heartbeats.")] = 5.0,
    key_check_interval: Annotated[
        float,
        typer.Option(
            envvar="FATHOM_KEY_CHECK_INTERVAL",
            show_envvar=True,
            help="Seconds between reads of the key's limits and credits, reported to the server's budget; "
            "also read on every key push and after a storm of 429s/402s.",
        ),
    ] = DEFAULT_INTERVAL_S,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            envvar="FATHOM_SIDECAR_STATE_DIR",
            show_envvar=True,
            show_default=False,
            help="Where this sidecar keeps its identity credential (default ~/.fathom-sidecar).",
        ),
    ] = None,
    log_level: LogLevel = "INFO",
    log_format: LogFormat = "text",
) -> None:
    """Join a Fathom server's fleet as a sidecar: --server wss://HOST --serve ROLE=BACKEND."""
    setup_logging(log_level, log_format)
    try:
        secret = join_token(token, token_file)
    except ConfigError as exc:
        print(f"fathom sidecar: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None

    from fathom.fleet.agent import SidecarRefused, run_sidecar

    async def _main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        await run_sidecar(
            server,
            secret,
            name or socket.gethostname().split(".")[0],
            serve or [],
            openrouter_base_url=openrouter_url,
            cloud=not no_cloud,
            heartbeat_interval=heartbeat,
            stop=stop,
            state_dir=state_dir,
            key_check_interval=key_check_interval,
        )

    try:
        asyncio.run(_main())
    except (SidecarRefused, ConfigError) as exc:
        print(f"fathom sidecar: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None


def join_token(on_argv: str | None, token_file: Path | str | None) -> str:
    """The sidecar's join (or host) token: from a file, the environment (FATHOM_SIDECAR_TOKEN) or,
    with a warning, the command line. `ConfigError` when none is given."""
    if on_argv:
        print(
            "fathom sidecar: warning: the token given with --token is visible to every user of this host "
            "(ps, /proc/PID/cmdline); pass it in FATHOM_SIDECAR_TOKEN or a file (--token-file) instead",
            file=sys.stderr,
        )
        return on_argv.strip()
    if token_file:
        path = Path(token_file).expanduser()
        try:
            token = path.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the token file {path}: {exc.strerror or exc}") from None
        if not token:
            raise ConfigError(
                f"the token file {path} is empty: put the join token `fathom server` printed in it"
            )
        return token
    token = Settings.secret(Settings().sidecar_token) or ""
    if not token:
        raise ConfigError(
            "a join token is required: set FATHOM_SIDECAR_TOKEN, or pass --token-file FILE "
            "(the join token `fathom server` printed, or a host token from `fathom fleet token`)"
        )
    return token


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m fathom.fleet.command [OPTIONS]`: the same command as `fathom sidecar`."""
    return run_command(sidecar, argv, prog="python -m fathom.fleet.command")


if __name__ == "__main__":
    sys.exit(main())
