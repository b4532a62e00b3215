"""One typer command run on its own, for the `python -m` spellings of `fathom server` and
`fathom sidecar`: the same function, options and help as under `fathom`, so the two never
drift apart, and an exit code back instead of `SystemExit`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import click
import typer


def run_command(command: Callable[..., None], argv: Sequence[str] | None, *, prog: str) -> int:
    """Parse `argv` for `command` and run it; its exit code (2 for a usage error)."""
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
