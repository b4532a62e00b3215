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
from tests.retrieval_fixtures import local_encoder, sample_project  # noqa: F401

runner = CliRunner()


@pytest.fixture
def fathom(tmp_path: Path, local_encoder) -> Fathom:  # noqa: F811
    return Fathom(Settings(data_dir=tmp_path / "data"), encoder=local_encoder)


def invoke(fathom: Fathom, *args: str):
    return runner.invoke(app, list(args), obj={"fathom": fathom}, env={"COLUMNS": "160"})


def test_index_search_projects(fathom, sample_project):  # noqa: F811
    (sample_project / "blob.bin").write_bytes(bytes(range(256)) * 8)
    result = invoke(fathom, "index", str(sample_project), "--project", "shop")
    assert result.exit_code == 0, result.output
    assert "indexed shop" in result.output
    assert "skipped files" in result.output and "binary" in result.output

    result = invoke(fathom, "search", "verify a password against its hash", "-k", "3")
    assert result.exit_code == 0, result.output
    assert "shop/auth/password.py:" in result.output
    assert "verify_password" in result.output

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
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: no project 'ghost'")
