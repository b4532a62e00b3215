"""The global options, taken before the command or after it: `fathom --data-dir X search q`
and `fathom search q --data-dir X` mean the same.

The `fathom` app's callback declares them (before the command); `accept_global_options` gives
every command under it, those of sub-apps included (`fathom store verify --data-dir X`), the
same option, which writes where the callback's value lives, so `settings_of(ctx)` reads one
value whichever place it came from. The command line beats the environment (FATHOM_DATA_DIR)
in either place.

It refuses two different folders given in the two places (each is where one of them was
meant): the error names both. A command that declares `--data-dir` itself (`fathom server`,
which `python -m fathom.server` shares) keeps its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import typer

from fathom.config import is_loopback
from fathom.errors import ConfigError

DATA_DIR_HELP = "Where indexes and state live (default ~/.fathom); also taken before the command."


class DataDirTwice(ConfigError):
    """`--data-dir` before the command and again after it, naming different folders."""

    def __init__(self, before: Path, after: Path):
        self.before, self.after = before, after
        super().__init__(
            f"--data-dir was given twice, {before} before the command and {after} after it: give it once"
        )


def _data_dir_after(ctx: typer.Context, value: Path | None) -> None:
    if value is None:
        return
    root = ctx.find_root()
    obj = root.obj if root.obj is not None else {}
    before = obj.get("data_dir")
    if before is not None and _from_command_line(root) and Path(before) != value:
        raise DataDirTwice(Path(before), value)
    obj["data_dir"] = value
    obj.pop("settings", None)  # built from the other value, if anything built it already
    root.obj = obj


def _from_command_line(root: Any) -> bool:
    source = root.get_parameter_source("data_dir")
    return source is not None and source.name == "COMMANDLINE"


def _data_dir_option() -> Any:
    """The option as typer builds it (type, help, callback), taken from a one-command app: it
    only sets the root's value, so it is not passed to the command's function."""
    options = typer.Typer()

    @options.command()
    def _(
        data_dir: Annotated[
            Path | None,
            typer.Option("--data-dir", show_default=False, callback=_data_dir_after, help=DATA_DIR_HELP),
        ] = None,
    ) -> None:
        """Never run."""

    param = typer.main.get_command(options).params[0]
    param.expose_value = False
    return param


def accept_global_options(group: Any) -> None:
    """Give every command under `group` (recursively) the global options it does not declare."""
    option = _data_dir_option()
    pending = list(group.commands.values())
    while pending:
        command = pending.pop()
        sub = getattr(command, "commands", None)
        if sub is not None:
            pending.extend(sub.values())
            if not getattr(command, "invoke_without_command", False):
                continue  # a group that runs nothing itself (`fathom models` lists: it takes them)
        if not any("--data-dir" in getattr(p, "opts", ()) for p in command.params):
            command.params.append(option)


def server_url(server: str) -> str:
    """`--server` as a base URL, or a refusal saying what it takes."""
    url = server.rstrip("/")
    if "://" not in url:
        raise ConfigError(f"--server must be a URL such as http://127.0.0.1:8766, got {server!r}")
    if url.startswith(("ws://", "wss://")):
        raise ConfigError(f"--server takes the server's http:// URL here, not its sidecar address {server!r}")
    if url.startswith("http://") and not is_loopback(urlsplit(url).hostname or ""):
        raise ConfigError(
            f"--server {server!r}: a token would cross the network in clear text; use the "
            f"server's https:// address (behind its TLS proxy), or http:// only to this machine"
        )
    return url
