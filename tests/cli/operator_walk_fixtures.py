"""The assembled product for the stateful operator test (`tests/cli/test_operator_walk.py`).

`Rig` runs, each as its own process: a real `fathom server` (restartable over the same data
dir and port), one real `fathom sidecar` holding no local model (its cloud routes only), and
the OpenRouter emulator. It drives them as an operator does: the `fathom` CLI for the key push
and policy changes (the key travels on stdin, never a command line), the admin HTTP API for
the rest. And it reads back what the invariants need: the rows of the project's tables (with
their vectors and provenance, straight from the LanceDB files), the gate's verdicts and
audit, the budget, and the emulator's counters.

Every process writes its own log file (one per incarnation, so a restart keeps the old log)
under the rig's folder; `close()` stops each by its pid. Every wait is bounded.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from fathom.devtools.emulator import MINILM, EmulatorControl
from tests.fleet.fleet_fixtures import (
    ADMIN,
    PY,
    Proc,
    ProcessGroup,
    free_port,
    spawn_emulator,
    spawn_server,
    spawn_sidecar,
    wait_until,
)

SIDECAR = "gpu1"
PROJECT = "walk"
TABLES = ("code", "docs")
EMBEDDING_ROLES = ("code-embedding", "embedding")
# The emulator's upstreams of MiniLM: alpha serves the reference's own numerics, beta int8.
GOOD_PIN, BAD_PIN = "alpha", "beta"
FATHOM = str(Path(PY).parent / "fathom")


def cloud_id(role: str, pin: str) -> str:
    return f"sidecar:{SIDECAR}:{role}:cloud:{pin}"


@dataclass(frozen=True)
class Row:
    table: str
    chunk_id: str
    path: str
    text: str
    vector: np.ndarray
    provider_id: str
    verdict_id: str | None
    written_at: float  # epoch seconds


class Rig:
    def __init__(self, folder: Path, *, canary: str | None = None):
        self.folder = folder
        self.data_dir = folder / "data"
        self.project_dir = folder / "project"
        self.group = ProcessGroup(folder / "logs")
        self.port = free_port()
        self.emu_port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # The canary: a well-formed OpenRouter key that must never reach a file or a log.
        self.key = canary or "sk-or-v1-" + secrets.token_hex(24)
        self.server: Proc | None = None
        self.sidecar: Proc | None = None
        self.incarnations = {"server": 0, "sidecar": 0}
        self.emulator = EmulatorControl(f"http://127.0.0.1:{self.emu_port}")
        self.admin = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120
        )
        self._store: Any = None

    # -- processes ---------------------------------------------------------------------

    def start(self) -> None:
        spawn_emulator(
            self.group, self.emu_port, ["--remember"]
        )  # the gate's probes are sent again and again
        self.start_server()
        # Approved before it first connects, as an operator who knows the host would.
        self.ok("POST", f"/admin/fleet/{SIDECAR}/approve", params={"pre_approve": "true"})
        self.start_sidecar()

    def start_server(self) -> None:
        self.incarnations["server"] += 1
        self.server = spawn_server(
            self.group,
            self.data_dir,
            self.port,
            log_level="DEBUG",
            extra=["--no-watch"],
            log_name=f"server-{self.incarnations['server']}",
        )

    def stop_server(self) -> None:
        assert self.server is not None
        self.group.kill(self.server, 15)  # SIGTERM: the operator's stop
        self.server = None
        self._close_store()

    def start_sidecar(self) -> None:
        self.incarnations["sidecar"] += 1
        self.sidecar = spawn_sidecar(
            self.group,
            SIDECAR,
            self.port,
            [],
            log_level="DEBUG",
            extra=["--openrouter-url", f"http://127.0.0.1:{self.emu_port}/api/v1"],
            log_name=f"sidecar-{self.incarnations['sidecar']}",
        )

    def stop_sidecar(self) -> None:
        assert self.sidecar is not None
        self.group.kill(self.sidecar, 9)  # a host that went away: SIGKILL
        self.sidecar = None

    def live(self) -> list[Proc]:
        return [p for p in (self.server, self.sidecar) if p is not None]

    def wait_connected(self, timeout: float = 90.0) -> None:
        def connected() -> bool:
            try:
                fleet = self.get("/admin/fleet")
            except httpx.HTTPError:
                return False
            return any(
                s["name"] == SIDECAR and s["connected"] and s["state"] == "approved"
                for s in fleet["sidecars"]
            )

        wait_until(connected, f"sidecar {SIDECAR} connected and approved", timeout, procs=self.live())

    def close(self) -> None:
        self._close_store()
        self.admin.close()
        self.emulator.close()
        self.group.stop()

    # -- the operator's calls ----------------------------------------------------------

    def call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return self.admin.request(method, path, **kw)

    def ok(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        r = self.call(method, path, **kw)
        if r.status_code >= 300:
            raise AssertionError(f"{method} {path} answered {r.status_code}: {r.text[:2000]}")
        return r.json()

    def get(self, path: str, **kw: Any) -> dict[str, Any]:
        return self.ok("GET", path, **kw)

    def cli(self, *args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        """`fathom ARGS` against this server, the admin token from the environment."""
        env = {
            **os.environ,
            "FATHOM_ADMIN_TOKEN": ADMIN,
            "FATHOM_SERVER": self.url,
            "COLUMNS": "200",
            "NO_COLOR": "1",
        }
        return subprocess.run(
            [FATHOM, *args],
            input=stdin if stdin is not None else "",
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )

    def index(self, timeout: float = 240.0) -> dict[str, Any]:
        """Start an incremental index job of the project folder and wait for its end."""
        job = self.ok("POST", "/admin/jobs", json={"path": str(self.project_dir), "project": PROJECT})
        return wait_until(
            lambda: (j := self.get(f"/admin/jobs/{job['id']}"))["finished"] and j,
            f"index job {job['id']}",
            timeout,
            procs=self.live(),
        )

    # -- what the invariants read -------------------------------------------------------

    def _close_store(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def rows(self) -> list[Row]:
        """Every row of the project's active tables, read from the LanceDB files."""
        from fathom.index.store import LanceStore

        if not (self.data_dir / "lance" / "projects").exists():
            return []
        if self._store is None:
            self._store = LanceStore(self.data_dir / "lance")
        store = self._store
        if not store.has_project(PROJECT):
            return []
        out: list[Row] = []
        for table in TABLES:
            tbl = store.slot_table(PROJECT, table)
            if tbl is None:
                continue
            data = (
                tbl.search()
                .select(["chunk_id", "path", "text", "vector", "provider_id", "verdict_id", "written_at"])
                .limit(None)
                .to_arrow()
            )
            if data.num_rows == 0:
                continue
            width = tbl.schema.field("vector").type.list_size
            vectors = (
                data["vector"].combine_chunks().flatten().to_numpy(zero_copy_only=False).reshape(-1, width)
            )
            for i, (cid, path, text, pid, vid, at) in enumerate(
                zip(
                    data["chunk_id"].to_pylist(),
                    data["path"].to_pylist(),
                    data["text"].to_pylist(),
                    data["provider_id"].to_pylist(),
                    data["verdict_id"].to_pylist(),
                    data["written_at"].to_pylist(),
                    strict=True,
                )
            ):
                out.append(
                    Row(table, cid, path, text, np.asarray(vectors[i], np.float32), pid, vid, at.timestamp())
                )
        return out

    def verdicts(self) -> dict[str, dict[str, Any]]:
        """Every verdict ever, by id."""
        return {
            v["verdict_id"]: v
            for v in self.get("/admin/gate/verdicts", params={"history": "true"})["verdicts"]
        }

    def latest_verdicts(self) -> list[dict[str, Any]]:
        return self.get("/admin/gate/verdicts")["verdicts"]

    def policies(self) -> dict[str, Any]:
        return self.get("/admin/policies")["roles"]

    def budget(self) -> dict[str, Any]:
        return self.get("/admin/budget")

    def files_and_logs(self) -> list[Path]:
        files = [p for p in self.data_dir.rglob("*") if p.is_file()]
        return files + [p.log_path for p in self.group.procs]


def write_module(root: Path, tag: str, functions: int = 4) -> Path:
    """A new Python file of `functions` small functions, each with a docstring (a code chunk
    and a docs chunk apiece), unlike any other file (its tag is in every name and sentence)."""
    lines = [f'"""Helpers of area {tag}: scaling and offsets for the {tag} stage."""', ""]
    for i in range(functions):
        lines += [
            f"def scale_{tag}_{i}(value, factor={i + 2}):",
            f'    """Scale a {tag} reading by factor {i + 2}, then add the {tag} offset {i * 7 + 3}."""',
            f"    total = value * factor + {i * 7 + 3}",
            f"    return total  # {tag}",
            "",
            "",
        ]
    path = root / "pkg" / f"mod_{tag}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    return path


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return np.sum(a * b, axis=1)


__all__ = [
    "Rig",
    "Row",
    "write_module",
    "cosine_rows",
    "cloud_id",
    "SIDECAR",
    "PROJECT",
    "TABLES",
    "EMBEDDING_ROLES",
    "GOOD_PIN",
    "BAD_PIN",
    "MINILM",
]
