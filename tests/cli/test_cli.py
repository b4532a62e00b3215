"""The `fathom` CLI: index with a summary, search tables, projects, and the error contract
(one line, exit 1 or 2, never a traceback)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fathom.cli import app
from fathom.config import Settings
from fathom.service import Fathom

runner = CliRunner()


@pytest.fixture
def fathom(tmp_path: Path, local_encoder) -> Fathom:
    return Fathom(Settings(data_dir=tmp_path / "data"), encoder=local_encoder)


def invoke(fathom: Fathom, *args: str):
    return runner.invoke(app, list(args), obj={"fathom": fathom}, env={"COLUMNS": "160"})


def test_index_search_projects(fathom, sample_project):
    (sample_project / "blob.bin").write_bytes(bytes(range(256)) * 8)
    result = invoke(fathom, "index", str(sample_project), "--project", "shop")
    assert result.exit_code == 0, result.output
    assert "indexed shop" in result.output
    assert "skipped files" in result.output and "binary" in result.output

    result = invoke(fathom, "search", "verify a password against its hash", "-k", "3")
    assert result.exit_code == 0, result.output
    assert "auth/password.py:" in result.output and "shop/auth" not in result.output
    assert "verify_password" in result.output

    # One result per file by default, naming the file's other matching ranges; one per chunk
    # on asking: the same file then takes several places.
    per_file = invoke(fathom, "search", "hash a password and verify it", "-k", "5")
    per_chunk = invoke(fathom, "search", "hash a password and verify it", "-k", "5", "--group", "chunk")
    assert per_file.exit_code == 0 and per_chunk.exit_code == 0, per_file.output + per_chunk.output
    assert per_file.output.count("auth/password.py:") == 1, per_file.output
    assert re.search(r"auth/password\.py:\d+-\d+ .*│ \d+-\d+", per_file.output), per_file.output
    assert "┃ also" in per_file.output and "┃ also" not in per_chunk.output  # its own column
    assert per_chunk.output.count("auth/password.py:") >= 2, per_chunk.output
    bad = invoke(fathom, "search", "x", "--group", "line")
    assert bad.exit_code == 2 and "group must be one of file, chunk" in bad.output, bad.output

    result = invoke(fathom, "search", "how do I install it", "--docs", "--project", "shop")
    assert result.exit_code == 0, result.output
    assert "README.md" in result.output

    result = invoke(fathom, "projects")
    assert result.exit_code == 0 and "shop" in result.output

    # Re-running is incremental: nothing to embed.
    result = invoke(fathom, "index", str(sample_project), "--project", "shop")
    assert result.exit_code == 0, result.output
    assert re.search(r"embedded\s+0 in", result.output), result.output


def test_errors_are_one_line_with_exit_codes(fathom, tmp_path):
    result = invoke(fathom, "search", "anything", "--project", "nope")
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert "no project 'nope'" in result.output

    result = invoke(fathom, "search", "anything", "-k", "0")
    assert result.exit_code == 2 and "k must be" in result.output

    result = invoke(fathom, "index", str(tmp_path / "missing"))
    assert result.exit_code == 2 and "no such folder" in result.output


def test_real_process_error_has_no_traceback(tmp_path):
    env = dict(os.environ, FATHOM_DATA_DIR=str(tmp_path / "data"), HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "fathom.cli", "search", "anything", "--project", "ghost"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: no project 'ghost'")


def test_drop_asks_first_and_removes_everything(fathom, sample_project):
    assert invoke(fathom, "index", str(sample_project), "--project", "shop").exit_code == 0
    refused = runner.invoke(app, ["drop", "shop"], obj={"fathom": fathom}, input="n\n")
    assert refused.exit_code == 1 and "Remove project 'shop'" in refused.output
    assert fathom.store.has_project("shop")  # answered no: nothing happened
    no_answer = runner.invoke(app, ["drop", "shop"], obj={"fathom": fathom}, input="")
    assert no_answer.exit_code == 1 and fathom.store.has_project("shop")
    agreed = runner.invoke(app, ["drop", "shop"], obj={"fathom": fathom}, input="y\n")
    assert agreed.exit_code == 0 and "dropped shop (code " in agreed.output
    assert not fathom.store.has_project("shop") and fathom.records.get("shop") is None
    assert not (fathom.settings.lance_dir / "projects" / "shop").exists()
    gone = invoke(fathom, "drop", "shop", "--yes")
    assert gone.exit_code == 1 and "no project 'shop'" in gone.output
    assert invoke(fathom, "index", str(sample_project), "--project", "shop").exit_code == 0
    assert invoke(fathom, "drop", "shop", "--yes").exit_code == 0


def test_include_filters_watch_setting_and_skipped_folders(fathom, sample_project):
    (sample_project / "vendor" / "mylib").mkdir(parents=True)
    (sample_project / "vendor" / "mylib" / "fastmath.py").write_text(
        "def fast_inverse_square_root(x):\n    return x ** -0.5\n"
    )
    (sample_project / "node_modules" / "left-pad").mkdir(parents=True)
    (sample_project / "node_modules" / "left-pad" / "index.js").write_text("module.exports = 1\n")
    result = invoke(fathom, "index", str(sample_project), "--project", "shop")
    assert result.exit_code == 0, result.output
    assert re.search(r"skipped folders\s+node_modules/, vendor/ \(built-in skip\)", result.output)

    result = invoke(fathom, "index", str(sample_project), "--project", "shop", "--include", "vendor/mylib/")
    assert result.exit_code == 0, result.output
    assert re.search(r"skipped folders\s+node_modules/ \(built-in skip\)", result.output)
    found = invoke(fathom, "search", "inverse square root", "--path", "vendor/**", "-k", "3")
    assert "vendor/mylib/fastmath.py" in found.output
    # Remembered: a later run without --include keeps it; --no-include forgets it.
    assert fathom.records.get("shop")["include"] == ["vendor/mylib/"]
    invoke(fathom, "index", str(sample_project), "--project", "shop")
    assert "vendor/mylib/fastmath.py" in {e.path for e in fathom.store.manifest("shop", "code")}
    invoke(fathom, "index", str(sample_project), "--project", "shop", "--no-include")
    assert "vendor/mylib/fastmath.py" not in {e.path for e in fathom.store.manifest("shop", "code")}

    only_js = invoke(fathom, "search", "verify a password", "--language", "javascript")
    assert only_js.exit_code == 0 and "web/server.js" in only_js.output
    assert "password.py" not in only_js.output and "(language javascript)" in only_js.output
    classes = invoke(fathom, "search", "totals", "--kind", "class")
    assert "Invoice" in classes.output and "hash_password" not in classes.output
    bad = invoke(fathom, "search", "x", "--kind", "lambda")
    assert bad.exit_code == 2 and "not a symbol kind" in bad.output

    assert "live sync on (not watched)" in invoke(fathom, "watching", "shop").output
    assert "live sync off" in invoke(fathom, "watching", "shop", "--off").output
    assert fathom.records.get("shop")["watch"] is False
    assert fathom.index_status("shop").watch["state"] == "off"
    assert "live sync on" in invoke(fathom, "watching", "shop", "--on").output


def test_cold_start_progress_says_what_it_is_doing(tmp_path, sample_project, minilm_path):
    import asyncio

    from fathom.inference.local import LocalEncoder

    settings = Settings(data_dir=tmp_path / "data")
    cold = LocalEncoder(minilm_path, model_name=settings.local_model_name, width=384)
    fathom = Fathom(settings, encoder=cold)
    events = []
    report = asyncio.run(fathom.index(sample_project, "shop", progress=events.append))
    phases = [e.phase for e in events]
    start = phases[: phases.index("walking")]
    # Start-up is named while it happens, before any walking.
    assert start[0] == "opening store" and "loading model" in start and "checking encoders" in start
    walking = events[phases.index("walking")]
    loading = events[phases.index("loading model")]
    # Elapsed counts from the start: the walk begins after the model load and the gate check.
    assert walking.elapsed_s >= loading.elapsed_s and report.elapsed_s >= walking.elapsed_s


@pytest.mark.slow
def test_fathom_watch_prints_a_line_per_sync(tmp_path, sample_project):
    import selectors
    import signal
    import time

    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fathom.cli",
            "--data-dir",
            str(tmp_path / "data"),
            "watch",
            str(sample_project),
            "--project",
            "shop",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)

    def read_until(needle: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(needle in line for line in lines):
            assert time.monotonic() < deadline, f"no {needle!r} in {lines}"
            assert proc.poll() is None, lines
            if sel.select(timeout=0.5):
                lines.append(proc.stdout.readline())

    try:
        read_until("Ctrl-C stops")
        with (sample_project / "net" / "retry.py").open("a") as fh:
            fh.write("\n\ndef jitter(delay):\n    return delay * 1.1\n")
        read_until("shop: 1 embedded")
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=60)
        finally:
            lines.extend(proc.stdout.readlines() if proc.poll() is not None else [])
        assert code == 0, lines  # a forced stop exits 1, with every thread's stack in lines
        assert any("stopped watching shop" in line for line in lines), lines
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
