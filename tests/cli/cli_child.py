"""The `fathom` CLI in a child process, killed with SIGKILL at a chosen moment.

A fresh `python -m fathom.cli` pays ~10 s of imports (torch, sentence-transformers, LanceDB)
before it does anything, which makes a test that kills and re-runs the CLI a dozen times
take minutes. So the children are forked from a *forkserver* that imported those modules once
(and never ran the model, so forking it is safe); each child then runs the real CLI entry
point, `fathom.cli.app(argv)`, with its own settings, store, model load and everything else,
exactly as the installed `fathom` command does.

A child can be told to kill itself (SIGKILL: no clean-up, no `finally`) at a moment chosen by
event: every LanceDB write, table creation and drop, index build, state-file write, rename and
fsync counts as one event. The plan names the n-th event overall or the n-th event inside the
promotion, and whether the kill lands just before it, just after it, or a few milliseconds into
it (from a timer thread, so it can land inside LanceDB's native code). The test may also kill
a child from outside after a delay.

    child = start(argv, log_path, plan=None, events_path=None)  -> multiprocessing.Process
    child.join(); child.exitcode   (-9 when killed)
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

# Imported here so that the forkserver, which preloads this module, holds them warm.
import fathom.cli  # noqa: F401
import fathom.index.indexer  # noqa: F401
import fathom.index.store  # noqa: F401
import fathom.service  # noqa: F401

try:  # the heavy part of a CLI start: import it once in the forkserver
    import lancedb  # noqa: F401
    import sentence_transformers  # noqa: F401
except ImportError:  # pragma: no cover
    pass


def _preloaded_model() -> Any:
    """The default model's weights, read once in the forkserver (never run there: no thread
    pool exists yet when it forks). A child's `LocalEncoder` takes them instead of reading the
    same folder from disk again; everything else about the child's start is its own."""
    from fathom.config import Settings

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        return sentence_transformers.SentenceTransformer(Settings().local_model_path, device="cpu")
    except Exception:  # noqa: BLE001 - the child then loads it itself
        return None


_MODEL = _preloaded_model()

_CONTEXT: Any = None


def context() -> Any:
    global _CONTEXT
    if _CONTEXT is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["tests.cli.cli_child"])
        _CONTEXT = ctx
    return _CONTEXT


def start(
    argv: list[str], log: Path, *, plan: dict[str, Any] | None = None, events: Path | None = None
) -> Any:
    proc = context().Process(
        target=_main, args=(list(argv), str(log), plan, str(events) if events else None), daemon=False
    )
    proc.start()
    return proc


def _main(argv: list[str], log: str, plan: dict[str, Any] | None, events: str | None) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    recorder = _Recorder(plan)
    recorder.install()
    if _MODEL is not None:
        from fathom.config import Settings
        from fathom.inference.local import LocalEncoder

        load = LocalEncoder.load
        default_path = Settings().local_model_path

        def warm_load(self: LocalEncoder) -> Any:
            if self._model is None and self.model_path == default_path:
                self._model = _MODEL
            return load(self)

        LocalEncoder.load = warm_load  # type: ignore[method-assign]
    from fathom.cli import app

    code: Any = 0
    try:
        app(argv, prog_name="fathom")
    except SystemExit as exc:
        code = exc.code
    finally:
        if events:
            Path(events).write_text(json.dumps(recorder.labels))
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 1)


class _Recorder:
    """Counts the run's storage events and carries out the kill plan."""

    def __init__(self, plan: dict[str, Any] | None):
        self.plan = plan or {}
        self.labels: list[str] = []
        self.promoting = 0
        self.in_promotion = 0
        self.lock = threading.Lock()

    def _due(self) -> bool:
        at = self.plan.get("at")
        if at is None:
            return False
        if self.plan.get("phase") == "promote":
            return bool(self.promoting) and self.in_promotion - 1 == at
        return len(self.labels) - 1 == at

    def event(self, label: str, call: Any) -> Any:
        with self.lock:
            self.labels.append(("promote:" if self.promoting else "") + label)
            if self.promoting:
                self.in_promotion += 1
            due = self._due()
        if not due:
            return call()
        when = self.plan.get("when", "before")
        if when == "before":
            _die()
        if when == "during":
            timer = threading.Timer(float(self.plan.get("delay", 0.0)), _die)
            timer.daemon = True
            timer.start()
            return call()
        out = call()
        _die()
        return out

    def install(self) -> None:
        from fathom.index import store as store_mod

        rec = self
        cls = store_mod.LanceStore

        def wrap_method(name: str) -> None:
            original = getattr(cls, name)

            def wrapper(*args: Any, **kwargs: Any) -> Any:
                return rec.event(name, lambda: original(*args, **kwargs))

            setattr(cls, name, staticmethod(wrapper) if name == "_merge" else wrapper)

        for name in ("_merge", "_create", "_drop", "_build_indexes", "_write_state", "collect_garbage"):
            wrap_method(name)
        # Everything the promotion does counts as "promote:" events.
        step = "promote_together" if hasattr(cls, "promote_together") else "promote"
        promote = getattr(cls, step)

        def promoting(self: Any, *args: Any, **kwargs: Any) -> Any:
            rec.promoting += 1
            try:
                return promote(self, *args, **kwargs)
            finally:
                rec.promoting -= 1

        setattr(cls, step, promoting)
        for name in ("replace", "fsync"):
            original = getattr(os, name)
            setattr(
                os,
                name,
                (lambda orig, n: lambda *a, **k: rec.event(f"os.{n}", lambda: orig(*a, **k)))(original, name),
            )


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
