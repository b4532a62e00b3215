"""What a `fathom mcp` session and the background Fathom do once started, whichever way the
command line was read: by the full app (`cli.serve`) or by the fast path (`cli.launch`).

What it owns: `serve_bridged` (a session relayed to the daemon, started if none runs; None,
said, when none can be had), `run_daemon` (the daemon: its encoder loading while it starts to
listen), `daemon_now` (`fathom daemon` as a bridge spawns it, with the full app's error
contract: `error: ...`, exit 2 for a configuration, else 1) and `warm_up`.

What it refuses: reading the command line or the settings (its callers hand them over), and
importing typer or rich: it prints plain lines (`say`), as the full app's consoles write them
to a file or pipe.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from fathom.errors import ConfigError, FathomError

if TYPE_CHECKING:
    from fathom.config import Settings
    from fathom.local_server import LocalServer
    from fathom.service import Fathom


class BridgeSettings(Protocol):
    """What a bridged session reads of the settings (`Settings` has it too)."""

    @property
    def data_dir(self) -> Path: ...

    @property
    def daemon_answer_s(self) -> float: ...

    @property
    def stop_grace_s(self) -> float: ...


def serve_bridged(settings: BridgeSettings, *, watch: bool, say: Callable[[str, str], None]) -> int | None:
    """Serve this session through the data dir's daemon (started if none runs) until the host
    leaves: the exit code. None, said through `say(line, style)`, when none can be had: the
    caller serves in-process."""
    from fathom.server.bridge import Bridge, DaemonUnavailable, SessionLost, start_daemon, stdin_lines
    from fathom.stopping import Stopped, run_stoppable

    def warn(line: str) -> None:
        say(line, "yellow")

    def restart() -> LocalServer:
        return start_daemon(settings.data_dir, watch=watch, answer_s=settings.daemon_answer_s, say=warn)

    try:
        daemon = restart()
    except DaemonUnavailable as exc:
        say(f"fathom mcp: serving in-process: {exc}", "yellow")
        return None
    say(f"fathom mcp: attached to the background Fathom (pid {daemon.pid})", "dim")
    bridge = Bridge(daemon, data_dir=settings.data_dir, watch=watch, say=warn, restart=restart)
    try:
        run_stoppable(bridge.run(stdin_lines()), grace_s=settings.stop_grace_s)
    except Stopped as exc:  # the host (or a person) ended the session; the daemon serves on
        say(f"fathom mcp: {exc}; the background Fathom serves on", "dim")
    except SessionLost as exc:
        say(f"fathom mcp: {exc}", "red")
        return 1
    return 0


def stderr_line(line: str, style: str) -> None:
    print(line, file=sys.stderr, flush=True)  # the host's log: plain lines, as rich writes them there


def warm_up(fathom: Fathom, say: Callable[[str], None]) -> None:
    """Start loading the encoder in the background, saying so, and again when it is loaded."""
    from fathom.service.warmup import needs_loading

    if not needs_loading(fathom.encoder):
        return
    say(f"loading the encoder {fathom.encoder.id} in the background")
    fathom.warm_up(on_ready=say)


def run_daemon(settings: Settings, fathom: Fathom, *, watching: bool, say: Callable[[str], None]) -> None:
    """The background Fathom (`server.daemon`): its encoder loading while it starts to listen,
    so a session's `initialize`, `tools/list` and `list_projects` do not wait for it."""
    from fathom.server.daemon import serve_daemon

    warm_up(fathom, say)
    serve_daemon(fathom, settings, watching=watching, say=say)


def daemon_now(data_dir: Path | None, *, no_watch: bool) -> int:
    """`fathom daemon` as a bridge spawns it, without the command line's imports; its refusals
    said as the full app says them (`error: ...`, exit 2 for a configuration, else 1)."""
    from fathom.config import Settings
    from fathom.errors import failure_of
    from fathom.service import Fathom

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    def say(line: str) -> None:
        stderr_line(line, "dim")

    try:
        settings = Settings(**({"data_dir": data_dir} if data_dir is not None else {}))
        run_daemon(settings, Fathom(settings), watching=settings.watch and not no_watch, say=say)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        failure = exc if isinstance(exc, FathomError) else failure_of(exc)
        if failure is None:
            raise
        return refused(failure)
    return 0


def refused(exc: FathomError) -> int:
    print("error: " + " ".join((str(exc) or type(exc).__name__).split()), file=sys.stderr, flush=True)
    return 2 if isinstance(exc, ConfigError) else 1
