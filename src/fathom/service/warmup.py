"""Loading the in-process encoder before the first search asks for it.

A long-running front end (`fathom mcp`, `fathom serve`, `fathom server`) starts a `Warmup` as
it starts: one daemon thread loads the encoder while the process already answers. A search that
comes before the load is done waits for that same load (the encoder's own lock makes it happen
once), and is told why it waits: `wait(notice)` calls `notice` once, with what it waits for,
before it blocks. `fathom search` run in-process uses the same object with a grace period, so a
load that ends within a second says nothing.

It owns no policy and no error: which encoder to warm is the caller's (the service's in-process
encoder, the default reference of every table it defines); a load that fails is remembered and
logged here, and the search that needs the encoder meets the same typed error when it loads it
itself. An encoder without `load` (a sidecar, a cloud route, a test's fake) needs no warming.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("fathom.service.warmup")

Notice = Callable[[str], "Awaitable[None] | None"]


def needs_loading(encoder: Any) -> bool:
    """Whether `encoder` has a model still to load in this process."""
    return callable(getattr(encoder, "load", None)) and not getattr(encoder, "loaded", True)


class Warmup:
    """One background load of `encoder`. `on_ready(line)` is called from the loading thread once
    it ends, with a line saying how it went (the front end shows it where its operator looks)."""

    def __init__(self, encoder: Any, *, on_ready: Callable[[str], None] | None = None):
        self.encoder = encoder
        self.on_ready = on_ready
        self.error: BaseException | None = None
        self.seconds: float | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        return str(getattr(self.encoder, "id", "the encoder"))

    @property
    def started(self) -> bool:
        return self._thread is not None or self._done.is_set()

    @property
    def state(self) -> str:
        """ "loading", "ready", "failed" or "not started", as `/health` shows it."""
        if self.error is not None:
            return "failed"
        if self.ready:
            return "ready"
        return "loading" if self.started else "not started"

    @property
    def ready(self) -> bool:
        """True once nothing is left to wait for: loaded, failed, or never needed."""
        return self._done.is_set() or not needs_loading(self.encoder)

    def start(self) -> Warmup:
        """Begin loading in a thread (once); returns self. Nothing to load: done at once. Not a
        daemon: a process that exits mid-load waits for it, since a native runtime torn down
        under a loading thread aborts the process ("terminate called…")."""
        if self.started:
            return self
        if not needs_loading(self.encoder):
            self._done.set()
            return self
        self._thread = threading.Thread(target=self._load, name="fathom-encoder-warmup", daemon=False)
        self._thread.start()
        return self

    def _load(self) -> None:
        began = time.perf_counter()
        try:
            self.encoder.load()
        except Exception as exc:  # the search that needs it meets the typed error
            self.error = exc
        finally:
            self.seconds = time.perf_counter() - began
            self._done.set()
        line = (
            f"encoder {self.name} could not load ({' '.join(str(self.error).split())}); searches will say why"
            if self.error is not None
            else f"encoder {self.name} loaded in {self.seconds:.1f}s: searches answer without waiting for it"
        )
        log.info("%s", line)
        if self.on_ready is not None:
            try:
                self.on_ready(line)
            except Exception:  # a front end's display must not break the load
                log.exception("showing that the encoder is ready failed")

    async def wait(self, notice: Notice | None = None, *, grace_s: float = 0.0) -> bool:
        """Wait until the load ends; True if this call had to wait. When it is still going after
        `grace_s` seconds, `notice` is told once, with what is being waited for."""
        if self.ready:
            return False
        if not self.started:
            self.start()
        if grace_s > 0 and await asyncio.to_thread(self._done.wait, grace_s):
            return True
        if notice is not None and not self._done.is_set():
            said = notice(f"waiting for the encoder {self.name} to finish loading (once per start)")
            if inspect.isawaitable(said):
                await said
        await asyncio.to_thread(self._done.wait)
        return True
