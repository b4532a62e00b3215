"""Stopping a long-running command (`fathom watch`, `fathom mcp`) on Ctrl-C or SIGTERM, within a
bounded time, whatever it is doing.

What it owns: `run_stoppable`, which runs a command's main coroutine so that

* SIGINT and SIGTERM both ask for the clean stop: the main task is cancelled, so each part
  ends at its next await (a sync keeps the batches it wrote, a first index promotes nothing,
  the watcher and the encoder close), and `Stopped` is raised for the command to say so
  (also when the unwinding itself raised: a task group that met a closed stream);
* a second signal ends the process at once, with the signal's exit code (130, 143);
* the clean stop has `grace_s` seconds (FATHOM_STOP_GRACE_S) from the first signal to the
  process's end, interpreter exit included: past them a watchdog writes every thread's
  stack to stderr (what the stop waited on is then on record) and ends the process with
  exit code 1, saying the stop was forced.

The clean stop is the one expected: the parts it waits on are all cancellable (stdin is read
on the event loop, `fathom.server.stdio`; the file watcher stops at its next step). The
watchdog only bounds what a future part might block on.

`bound_exit(signum, grace_s)` arms the same watchdog where no `run_stoppable` loop heard the
signal: a server that Ctrl-C reached before its own loop took the signals over (`fathom serve`,
`server.local.serve_with_run_file`) still ends within `grace_s`, whatever thread its exit waits on
(the encoder's warm-up is not a daemon thread).

What it refuses to do: install a signal handler outside `run_stoppable` (the handlers go with
its event loop), or exit with success when the stop was forced.

API:
    run_stoppable(coro, *, grace_s) -> the coroutine's result, or raises Stopped(signum)
    bound_exit(signum, grace_s): the watchdog alone, for a stop heard elsewhere
    STOP_SIGNALS, exit_code(signum)
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import signal
import sys
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
log = logging.getLogger(__name__)
_T = TypeVar("_T")


class Stopped(Exception):
    """The command was asked to stop by a signal, and stopped cleanly."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


def exit_code(signum: int) -> int:
    """The shell's convention: 128 + the signal's number (Ctrl-C: 130, SIGTERM: 143)."""
    return 128 + int(signum)


class _Watchdog:
    """Armed by the first stop signal: if the process is still alive `grace_s` later, every
    thread's stack goes to stderr and the process ends (a daemon thread: it never keeps the
    process alive, and it outlives the event loop, so the interpreter's exit is bounded too)."""

    def __init__(self, grace_s: float):
        self.grace_s = grace_s
        self.signum: int | None = None

    def arm(self, signum: int) -> None:
        self.signum = signum
        threading.Thread(target=self._expire, name="fathom-stop-watchdog", daemon=True).start()

    def _expire(self) -> None:
        # Waits on an event never set: the wait is the clock (a daemon thread ends with the
        # process, so a clean stop simply never reaches the lines below).
        threading.Event().wait(self.grace_s)
        sys.stderr.write(
            f"fathom: the stop did not finish within {self.grace_s:g} s "
            f"(FATHOM_STOP_GRACE_S); forcing it. What it waited on:\n"
        )
        sys.stderr.flush()
        faulthandler.dump_traceback(all_threads=True)
        os._exit(1)

    @property
    def armed(self) -> bool:
        return self.signum is not None


def bound_exit(signum: int, grace_s: float) -> None:
    """From now on the process has `grace_s` seconds to end, interpreter exit included; past
    them every thread's stack goes to stderr and it ends with exit code 1."""
    _Watchdog(grace_s).arm(signum)


def run_stoppable(coro: Coroutine[Any, Any, _T], *, grace_s: float) -> _T:
    """Run `coro` on a new event loop until it returns, or until a stop signal cancels it
    (then `Stopped` is raised once it has unwound). See the module docstring."""
    watchdog = _Watchdog(grace_s)

    async def main() -> _T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def on_signal(signum: int) -> None:
            if watchdog.armed:  # asked twice: the user does not want to wait
                sys.stderr.write("fathom: stopping now\n")
                sys.stderr.flush()
                os._exit(exit_code(signum))
            watchdog.arm(signum)
            task.cancel()

        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, on_signal, sig)
        return await coro

    try:
        return asyncio.run(main())
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        if watchdog.signum is None:
            raise
        # Asked to stop: what the unwinding raised (a library's task group meeting a stream
        # its peer closed first) is the stop's own by-product, not a failure to report.
        if not isinstance(exc, asyncio.CancelledError):
            log.debug("while stopping: %r", exc)
        raise Stopped(watchdog.signum) from None
