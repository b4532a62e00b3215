"""What the bench scripts share: the machine's description, an in-process OpenRouter emulator
on a free 127.0.0.1 port, a cheap stand-in encoder for routing benchmarks, LiteLLM set-up,
timing and table printing.

It owns no measurement of its own and refuses to hide anything a figure depends on: every
script prints `machine()` above its table, and the stand-in encoder is used only where the
benchmark measures routing (who gets which request, when), never where vectors are compared.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import platform
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import uvicorn  # noqa: E402

from fathom.devtools.emulator import EmulatorConfig, EmulatorControl, EmulatorState, create_app  # noqa: E402

BENCH_KEY = "sk-or-v1-bench-not-a-real-key"


# -- the machine -------------------------------------------------------------------------------


def machine() -> str:
    """One line: cores, RAM, CPU model, Python, and the load average right now (the machine is
    shared, so absolute figures move; ratios measured side by side in one run are what count)."""
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                ram = f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return (
        f"{os.cpu_count()} cores ({cpu}), {ram} RAM, Python {platform.python_version()}, "
        f"load average {load} at start"
    )


# -- a stand-in encoder for routing benchmarks ----------------------------------------------------


def hash_vectors(texts: Sequence[str], width: int) -> np.ndarray:
    """Deterministic unit vectors seeded by each text's CRC: microseconds per text, so the
    emulator's configured latency, not a model on two shared cores, is what a request costs."""
    out = np.empty((len(texts), width), dtype=np.float32)
    for i, t in enumerate(texts):
        out[i] = np.random.default_rng(zlib.crc32(t.encode())).standard_normal(width)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


def use_hash_encoders(width: int = 64) -> None:
    """Make every emulator upstream in this process answer with `hash_vectors` of `width`.

    Why: the emulator's real encoders take one lock per model and ~8 ms per chunk of CPU, so on
    this machine every upstream would queue behind one MiniLM and the benchmark would measure
    that lock, not routing. The emulator's own latency knob then stands for the upstream's
    speed. Only for routing benchmarks; the gate benchmark keeps the real encoders.
    """
    from fathom.devtools.emulator import encoders

    fake = encoders.Encoder("hash", lambda t: hash_vectors(t, width))
    with encoders._cache_lock:  # the emulator's per-process encoder cache (bench-only override)
        for variant in encoders.VARIANTS:
            encoders._cache[variant] = fake


# -- the emulator, in process -----------------------------------------------------------------------


@dataclass
class Emulator:
    name: str
    root_url: str  # http://127.0.0.1:PORT
    base_url: str  # .../api/v1
    control: EmulatorControl
    state: EmulatorState
    _server: _Server

    def stop(self) -> None:
        self.control.close()
        self._server.stop()


class _Server:
    """uvicorn in a daemon thread on a socket bound to 127.0.0.1:0 (a free port)."""

    def __init__(self, config: EmulatorConfig | None):
        self.app = create_app(config)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(
            uvicorn.Config(self.app, log_level="error", lifespan="off", access_log=False)
        )
        self.thread = threading.Thread(
            target=lambda: asyncio.run(self.server.serve(sockets=[self.sock])),
            name="bench-emulator",
            daemon=True,
        )

    def start(self, timeout: float = 20.0) -> None:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the OpenRouter emulator did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


@dataclass
class EmulatorProcess:
    """An emulator in a child process (`_emulator_process.py`), driven over its HTTP control
    API; the same attributes as `Emulator` but `state` (another process's memory)."""

    name: str
    root_url: str
    base_url: str
    control: EmulatorControl
    _proc: subprocess.Popen

    def stop(self) -> None:
        self.control.close()
        if self._proc.stdin:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def start_emulator_process(name: str, width: int) -> EmulatorProcess:
    """An emulator answering hashed vectors of `width`, in a process of its own on a free
    127.0.0.1 port, until `stop()`."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_emulator_process.py")), "--width", str(width)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.isdigit():
        proc.kill()
        raise RuntimeError(f"the emulator process {name} did not start")
    root = f"http://127.0.0.1:{line}"
    return EmulatorProcess(name, root, root + "/api/v1", EmulatorControl(root), proc)


def start_emulator(name: str = "emulator", config: EmulatorConfig | None = None) -> Emulator:
    """An OpenRouter emulator serving on a free 127.0.0.1 port until `stop()`."""
    srv = _Server(config)
    srv.start()
    root = f"http://127.0.0.1:{srv.port}"
    return Emulator(name, root, root + "/api/v1", EmulatorControl(root), srv.app.state.emulator, srv)


# -- LiteLLM ----------------------------------------------------------------------------------------


def import_litellm() -> Any:
    """LiteLLM, quiet and offline, or a clear instruction to install the bench extra."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of the price map
    os.environ.setdefault("LITELLM_TELEMETRY", "False")
    try:
        import litellm
    except ImportError:
        sys.exit(
            "LiteLLM is not installed. It is a benchmark-only extra: "
            "`.venv/bin/pip install -e '.[bench]'`, then run this script again."
        )
    litellm.telemetry = False
    litellm.suppress_debug_info = True
    litellm.set_verbose = False
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    return litellm


def litellm_version() -> str:
    try:
        from importlib.metadata import version

        return version("litellm")
    except Exception:  # noqa: BLE001
        return "not installed"


# -- timing and tables ------------------------------------------------------------------------------


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def rss_mib() -> float:
    """This process's resident memory now (MiB)."""
    return _status_kib("VmRSS") / 1024


def peak_rss_mib() -> float:
    """This process's peak resident memory (MiB) since it started or since `reset_peak_rss`."""
    return _status_kib("VmHWM") / 1024


def reset_peak_rss() -> bool:
    """Start a new peak-RSS window (Linux: writing 5 to clear_refs); False where refused."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def percentile(values: Iterable[float], q: float) -> float:
    arr = np.asarray(list(values), dtype=np.float64)
    return float(np.percentile(arr, q)) if arr.size else float("nan")


def texts(n: int, prefix: str = "chunk") -> list[str]:
    """N distinct short code-like chunks (distinct so hashed vectors differ)."""
    return [
        f"def {prefix}_{i}(x):\n    return x * {i} + {hashlib.md5(str(i).encode()).hexdigest()[:6]!r}"
        for i in range(n)
    ]


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain fixed-width table (also valid as the body of a Markdown table when pasted)."""
    cells = [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]

    def line(r: Sequence[str]) -> str:
        return (
            "| "
            + " | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
            + " |"
        )

    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in cells]
    return "\n".join(out)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if v != v:
            return "–"
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)
