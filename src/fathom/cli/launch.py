"""The `fathom` command's entry, and `fathom mcp`'s fast path to the background Fathom.

Why: an MCP host spawns `fathom mcp` for every session, and a session after the first only
relays its stdio to the daemon all sessions share (`server.bridge`). Through the full command
line it first imported typer, rich, the pydantic settings and every command group: most of a
second before the bridge ran, on every spawn.

What it owns:

- `main`, the `fathom` script's entry and `python -m fathom.cli`'s: a command line that is
  `fathom [--data-dir DIR] mcp [--no-watch] [--data-dir DIR]` (`bridge_request`), whose session
  settings the environment gives plainly (`session_settings`), runs the bridge with nothing but
  its own imports. Anything else (`--help`, `--version`, `--in-process` or
  FATHOM_MCP_IN_PROCESS, an option it does not take, a setting it cannot read as `Settings`
  would) goes to the full app (`fathom.cli.app`), which then does exactly what it did without
  this path, errors and help included;
- the spawned daemon's start: `fathom [--data-dir DIR] daemon [--no-watch]`, as a bridge spawns
  it (`server.bridge`), goes to `sessions.daemon_now` without the command groups;
- when a session can have no daemon (`sessions.serve_bridged` says why and returns None), the
  session is handed to the full app, in-process (`fathom mcp --in-process`).

What it refuses: deciding anything the full app would decide otherwise. It reads only the
settings a bridged session uses, and accepts a value only where `Settings` reads the same one
(`tests/server/test_mcp_fast_path.py` compares them); on any doubt it hands off.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fathom.cli.sessions import daemon_now, refused, serve_bridged, stderr_line
from fathom.errors import FathomError

BOOLS = {"1": True, "on": True, "t": True, "true": True, "y": True, "yes": True}
BOOLS |= {"0": False, "off": False, "f": False, "false": False, "n": False, "no": False}
PLAIN_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?")
MAX_S = 600.0  # FATHOM_DAEMON_ANSWER_S and FATHOM_STOP_GRACE_S: `Settings` takes (0, 600]


@dataclass(frozen=True)
class SessionSettings:
    """The settings of a bridged `fathom mcp`, read from the environment as `Settings` reads them."""

    data_dir: Path
    watch: bool = True
    mcp_in_process: bool = False
    daemon_answer_s: float = 10.0
    stop_grace_s: float = 10.0


def bridge_request(argv: Sequence[str]) -> tuple[Path | None, bool] | None:
    """(`--data-dir`, `--no-watch`) when `argv` is a `fathom mcp` the fast path serves, else None."""
    return _request(argv, "mcp")


def daemon_request(argv: Sequence[str]) -> tuple[Path | None, bool] | None:
    """The same for `fathom daemon`, as a session's bridge spawns it (`server.bridge`)."""
    return _request(argv, "daemon")


def _request(argv: Sequence[str], name: str) -> tuple[Path | None, bool] | None:
    data_dir: Path | None = None
    command, no_watch = False, False
    args = iter(argv)
    for arg in args:
        if arg == "--data-dir" or arg.startswith("--data-dir="):
            value = arg.partition("=")[2] if "=" in arg else next(args, "")
            if data_dir is not None or not value or value.startswith("-"):
                return None  # given twice, or no folder: the full app says what is wrong
            data_dir = Path(value)
        elif arg == name and not command:
            command = True
        elif arg == "--no-watch" and command:
            no_watch = True
        else:
            return None
    return (data_dir, no_watch) if command else None


def session_settings(
    data_dir: Path | None, environ: Mapping[str, str] | None = None
) -> SessionSettings | None:
    """The session's settings from `environ` (case aside, as `Settings` reads FATHOM_*), or None
    where a value is not one this reads exactly as `Settings` does (it then decides)."""
    env: dict[str, str] = {}
    for key, value in (os.environ if environ is None else environ).items():
        name = key.lower()
        if name.startswith("fathom_"):
            if name in env:
                return None  # one setting spelt twice: which one counts is `Settings`' call
            env[name] = value
    given = SessionSettings(data_dir or Path.home() / ".fathom")
    if data_dir is None and "fathom_data_dir" in env:
        if not env["fathom_data_dir"]:
            return None
        given = SessionSettings(Path(env["fathom_data_dir"]))
    flags: dict[str, bool] = {}
    for field in ("watch", "mcp_in_process"):
        if f"fathom_{field}" in env:
            if env[f"fathom_{field}"].lower() not in BOOLS:
                return None
            flags[field] = BOOLS[env[f"fathom_{field}"].lower()]
    seconds: dict[str, float] = {}
    for field in ("daemon_answer_s", "stop_grace_s"):
        if f"fathom_{field}" in env:
            raw = env[f"fathom_{field}"]
            if not PLAIN_NUMBER.fullmatch(raw) or not 0 < float(raw) <= MAX_S:
                return None
            seconds[field] = float(raw)
    return SessionSettings(
        given.data_dir,
        watch=flags.get("watch", given.watch),
        mcp_in_process=flags.get("mcp_in_process", given.mcp_in_process),
        daemon_answer_s=seconds.get("daemon_answer_s", given.daemon_answer_s),
        stop_grace_s=seconds.get("stop_grace_s", given.stop_grace_s),
    )


def _fast_start() -> None:
    """What the full app does first that a fast path needs too, and one import it can skip."""
    from fathom import logsafe
    from fathom.datadir import private_umask

    private_umask()  # as the full app's callback: the data dir is this user's alone
    # stderr is the MCP host's log, or the daemon's log file: no token, key or JWT reaches it
    logsafe.install()
    # httpx's own command line (click, rich, pygments) is imported by `import httpx` unless it
    # cannot be: None here makes that an ImportError, which httpx expects and stubs.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None, prog_name: str | None = None) -> int:
    """`fathom` (see the module docstring); `argv` defaults to the process's own."""
    args = list(sys.argv[1:] if argv is None else argv)
    spawned = daemon_request(args)
    if spawned is not None:
        _fast_start()
        return daemon_now(spawned[0], no_watch=spawned[1])
    request = bridge_request(args)
    settings = session_settings(request[0]) if request is not None else None
    if request is not None and settings is not None and not settings.mcp_in_process:
        _fast_start()
        try:
            code = serve_bridged(settings, watch=settings.watch and not request[1], say=stderr_line)
        except FathomError as exc:
            return refused(exc)
        if code is not None:
            return code
        args.append("--in-process")  # no daemon, said why: the full app serves here
        argv = args
    from fathom.cli.commands import app

    app(args=None if argv is None else args, prog_name=prog_name)  # exits, as typer does
    return 0
