"""Drive cocoindex-code for `bench/peer_side_by_side.py`: run by the peer's own Python (a
separate virtualenv whose sqlite3 can load extensions), never imported by Fathom.

Reads one JSON object on stdin:
    {"home": dir, "model": sentence-transformers folder, "limit": 10,
     "projects": [{"root": dir, "queries": [str, ...]}, ...]}
and writes one JSON object on stdout:
    {"projects": [{"root": dir, "chunks": n, "files": n, "index_s": s,
                   "results": [[[path, start, end], ...], ...], "search_ms": [ms, ...]}]}

With `"cpu": true` in the job (`bench/index_cpu.py`), a warm-up folder (`"warmup": dir`) is
indexed first, so the model is loaded before anything is counted, and each project also
reports `"cpu_s"`: the CPU seconds (user + system) its `client.index` cost the daemon, which
does the walking, chunking and embedding, and its child processes, plus this client.

Everything the peer writes (its settings, its daemon's socket and log, its indexes) goes
under `home` and each project's root; the model is loaded from `model` with the Hugging Face
hub offline. Uses the peer's client API, which is what its `ccc index` / `ccc search` commands
call, so one process asks every question instead of one process per question.
"""

from __future__ import annotations

import json
import os
import sys
import time


def _cpu() -> float:
    """CPU seconds so far of this client, the peer's daemon and the daemon's children."""
    import psutil
    from cocoindex_code._daemon_paths import daemon_pid_path

    me = psutil.Process().cpu_times()
    total = me.user + me.system
    daemon = psutil.Process(int(daemon_pid_path().read_text().strip()))
    for proc in [daemon, *daemon.children(recursive=True)]:
        t = proc.cpu_times()
        total += t.user + t.system + t.children_user + t.children_system
    return total


def main() -> None:
    job = json.load(sys.stdin)
    os.environ["COCOINDEX_CODE_DIR"] = job["home"]
    os.environ["COCOINDEX_CODE_RUNTIME_DIR"] = os.path.join(job["home"], "run")
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ[name] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from pathlib import Path

    from cocoindex_code import client
    from cocoindex_code.settings import (
        EmbeddingSettings,
        UserSettings,
        default_project_settings,
        save_project_settings,
        save_user_settings,
    )

    save_user_settings(
        UserSettings(
            embedding=EmbeddingSettings(provider="sentence-transformers", model=job["model"], device="cpu")
        )
    )
    out = []
    try:
        if job.get("warmup"):
            save_project_settings(Path(job["warmup"]), default_project_settings())
            client.index(job["warmup"])
        for project in job["projects"]:
            root = project["root"]
            save_project_settings(Path(root), default_project_settings())
            cpu0 = _cpu() if job.get("cpu") else 0.0
            t0 = time.perf_counter()
            client.index(root)
            index_s = time.perf_counter() - t0
            cpu_s = _cpu() - cpu0 if job.get("cpu") else None
            status = client.project_status(root)
            client.search(root, "warm up", limit=job["limit"])
            results, ms = [], []
            for query in project["queries"]:
                t0 = time.perf_counter()
                resp = client.search(root, query, limit=job["limit"])
                ms.append((time.perf_counter() - t0) * 1000)
                if not resp.success:
                    raise RuntimeError(f"peer search failed for {query!r}: {resp.message}")
                results.append([[r.file_path, r.start_line, r.end_line] for r in resp.results])
            out.append(
                {
                    "root": root,
                    "chunks": status.total_chunks,
                    "files": status.total_files,
                    "index_s": index_s,
                    "cpu_s": cpu_s,
                    "results": results,
                    "search_ms": ms,
                }
            )
    finally:
        client.stop()
    json.dump({"projects": out}, sys.stdout)


if __name__ == "__main__":
    main()
