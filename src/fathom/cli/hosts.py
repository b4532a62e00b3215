"""`fathom connect HOST`: write Fathom's entry into an MCP host's config file.

What it owns: the command's options, which `fathom` executable and data dir the entry names,
and the file's one write: a dry run by default (the unified diff of what would change), and
with `--write` a backup of the file as it was (`<file>.bak`, or `.bak.1`, … when that is
taken), then the new text put in place at once (`atomic_write_text`), with the old file's
permissions.

What it refuses: the edit itself (that is `fathom.hosts`, which refuses a file it cannot
parse); writing when the file changed since it was read; writing a token (an HTTP entry names
`FATHOM_MCP_TOKEN`, which the host reads from its environment, or VS Code's prompt).
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from fathom.config import atomic_write_text
from fathom.errors import ConfigError
from fathom.hosts import (
    HOSTS,
    TOKEN_ENV,
    HostConfigUnreadable,
    Launch,
    check_host,
    config_path,
    unified_diff,
    updated_text,
)

SERVE_URL = "http://127.0.0.1:8766/mcp"  # `fathom serve`'s default address


def fathom_executable(argv0: str | None = None) -> str:
    """The absolute path of the `fathom` this process runs as (or the one beside its Python):
    a host spawns it without this shell's PATH or virtualenv."""
    name = "fathom.exe" if sys.platform.startswith("win") else "fathom"
    argv0 = sys.argv[0] if argv0 is None else argv0
    candidates = [Path(argv0)] if Path(argv0).name == name else []
    candidates.append(Path(sys.executable).parent / name)
    found = shutil.which(name)
    if found:
        candidates.append(Path(found))
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate.absolute())
    raise ConfigError(
        "no `fathom` executable was found beside this Python or on PATH: install "
        "Fathom (pip install .) and run `fathom connect` from that install"
    )


def stdio_launch(data_dir: Path, executable: str) -> Launch:
    args: tuple[str, ...] = ("mcp",)
    # The host starts fathom without this shell's FATHOM_DATA_DIR: a data dir other than the
    # default is named in the entry.
    if data_dir.expanduser().absolute() != (Path.home() / ".fathom").absolute():
        args += ("--data-dir", str(data_dir.expanduser().absolute()))
    return Launch(command=executable, args=args)


def read_config(path: Path) -> str | None:
    """The file's text; None when there is no file yet."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise HostConfigUnreadable(path, "not UTF-8 text") from None
    except OSError as exc:
        raise HostConfigUnreadable(path, f"cannot be read ({exc.strerror or exc})") from None


def backup_path(path: Path) -> Path:
    """`<file>.bak`, or the first free `<file>.bak.N`: an earlier backup is never overwritten."""
    candidate, n = path.with_name(path.name + ".bak"), 0
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.bak.{n}")
    return candidate


def write_config(path: Path, old: str | None, new: str) -> Path | None:
    """Put `new` in place of `old`, after a backup of `old`; the backup's path (None for a new
    file)."""
    if read_config(path) != old:
        raise ConfigError(
            f"{path} changed while fathom connect was reading it; nothing was written: run it again"
        )
    if old is None:
        atomic_write_text(path, new)
        return None
    backup = backup_path(path)
    shutil.copy2(path, backup)
    mode = path.stat().st_mode
    atomic_write_text(path, new)
    os.chmod(path, stat.S_IMODE(mode))  # the host's file keeps its permissions
    return backup


def register(app: typer.Typer, *, settings: Any) -> None:
    @app.command("connect")
    def connect(
        ctx: typer.Context,
        host: Annotated[str, typer.Argument(help=f"The MCP host: {', '.join(HOSTS)}.")],
        http: Annotated[
            bool,
            typer.Option(
                "--http",
                help="Point the host at a running `fathom serve` (streamable HTTP) "
                "instead of spawning `fathom mcp`.",
            ),
        ] = False,
        url: Annotated[str, typer.Option("--url", help="The MCP address, with --http.")] = SERVE_URL,
        workspace: Annotated[
            Path | None,
            typer.Option(
                "--workspace",
                metavar="DIR",
                help="Write the project's own config in DIR (.mcp.json, .cursor/mcp.json, "
                ".vscode/mcp.json, .gemini/settings.json, .codex/config.toml) instead of "
                "the user's.",
            ),
        ] = None,
        write: Annotated[
            bool, typer.Option("--write", help="Apply the change (after a backup); without it, only show it.")
        ] = False,
    ) -> None:
        """Add Fathom to an MCP host's config file: shows the diff, --write applies it.

        Every other server and setting of the file is kept; a file that does not parse is left
        as it is. docs/hosts.md shows each host's entry.
        """
        check_host(host)
        path = config_path(
            host,
            home=Path.home(),
            env=dict(os.environ),
            platform=sys.platform,
            workspace=workspace.expanduser().absolute() if workspace else None,
        )
        launch = Launch(url=url) if http else stdio_launch(settings(ctx).data_dir, fathom_executable())
        old = read_config(path)
        new = updated_text(host, path, old, launch)
        if new == old:
            typer.echo(f"{path} already has Fathom's entry as it should be; nothing to change.")
            return
        typer.echo(unified_diff(path, old, new), nl=False)
        if not write:
            typer.echo("dry run: nothing was written; run again with --write to apply it.")
            return
        backup = write_config(path, old, new)
        typer.echo(f"wrote {path}" + (f" (the old file is in {backup})" if backup else ""))
        if http and host != "vscode":
            typer.echo(
                f"the host sends ${TOKEN_ENV} as the token: set it where the host starts "
                "(fathom serve prints the token on its first start)."
            )
