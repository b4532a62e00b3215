"""What the long-running commands (`fathom server`, `fathom sidecar`) share: their log set-up,
and one typer command run on its own for their `python -m` spellings (the same function,
options and help as under `fathom`, so the two never drift apart, and an exit code back
instead of `SystemExit`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated

import click
import typer

from fathom import logsafe
from fathom.datadir import private_umask

# `--log-level` of the long-running commands (`server`, `sidecar`).
LogLevel = Annotated[
    str,
    typer.Option(
        envvar="FATHOM_LOG_LEVEL", show_envvar=True, help="DEBUG, INFO, WARNING or ERROR (logs go to stderr)."
    ),
]


# `--log-format` of the same commands.
def _log_format(value: str) -> str:
    if value not in logsafe.LOG_FORMATS:
        raise typer.BadParameter(f"{value!r} is not a log format: use {' or '.join(logsafe.LOG_FORMATS)}")
    return value


LogFormat = Annotated[
    str,
    typer.Option(
        envvar="FATHOM_LOG_FORMAT",
        show_envvar=True,
        callback=_log_format,
        help="text (lines) or json (one object per line, for a log collector).",
    ),
]


def setup_logging(level: str, log_format: str = "text") -> None:
    """Logs to stderr at `level`, as text or JSON lines, every record through the secret filter first."""
    logsafe.configure(level, log_format)


def run_command(command: Callable[..., None], argv: Sequence[str] | None, *, prog: str) -> int:
    """Parse `argv` for `command` and run it; its exit code (2 for a usage error)."""
    # Whatever it writes (the data dir, a sidecar's state) is this user's alone.
    private_umask()
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(command)
    try:
        code = app(args=list(argv) if argv is not None else None, prog_name=prog, standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.Abort:
        return 130
    return code if isinstance(code, int) else 0
