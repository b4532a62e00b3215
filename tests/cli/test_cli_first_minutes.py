"""What a new user reads in their first minutes with the `fathom` CLI: a first index said as
one, never a negative duration, a mistyped project answered with the name meant, settings
refused with the values they accept, and the models table readable at 80 columns."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from fathom.cli import app
from fathom.config import Settings
from fathom.service import Fathom

runner = CliRunner()


def invoke(fathom: Fathom, *args: str, columns: int = 160):
    return runner.invoke(app, list(args), obj={"fathom": fathom}, env={"COLUMNS": str(columns)})


def row(output: str, name: str) -> str:
    """The value of the index summary's row `name`."""
    found = re.search(rf"^\s*{name}\s+(.+?)\s*$", output, re.M)
    assert found, output
    return found.group(1)


def test_first_index_then_a_mistyped_project(
    tmp_path: Path,
    local_encoder,
    sample_project: Path,
):
    # A clock that moves at every reading: a duration computed from two readings of "now"
    # comes out negative, one computed from a start and an end never does.
    ticks = itertools.count(0.0, 0.25)
    fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=local_encoder, clock=lambda: next(ticks))
    first = invoke(fathom, "index", str(sample_project), "--project", "shop")
    assert first.exit_code == 0, first.output
    assert row(first.output, "mode") == "full (first index)", first.output

    again = invoke(fathom, "index", str(sample_project), "--project", "shop")
    assert again.exit_code == 0, again.output
    assert row(again.output, "mode") == "incremental", again.output
    embedded = row(again.output, "embedded")
    assert embedded.startswith("0 in 0.0s"), again.output
    assert "-" not in row(first.output, "embedded") + embedded, first.output + again.output

    # A mistyped project: the refusal names the project meant, then how to index a new one.
    for command in (["search", "retry with backoff", "--project", "shopp"], ["drop", "shopp", "--yes"]):
        typo = invoke(fathom, *command)
        said = " ".join(typo.output.split())
        assert typo.exit_code != 0 and "no project 'shopp'" in said, said
        assert "Did you mean 'shop'?" in said, said
    far = invoke(fathom, "search", "retry", "--project", "billing")
    assert far.exit_code != 0 and "Did you mean" not in far.output, far.output


def test_a_malformed_setting_lists_the_values_it_accepts(monkeypatch, tmp_path: Path):
    """A bad boolean and an unknown device are refused at start, in one line naming the variable
    and every value it takes: before any model is loaded, not blamed on the model's path."""
    for name, value, accepted in (
        ("FATHOM_WATCH", "maybe", "true or false, 1 or 0, yes or no, on or off"),
        ("FATHOM_LOCAL_DEVICE", "gpu", "cpu, cuda, cuda:N (the GPU numbered N) or mps"),
    ):
        monkeypatch.setenv(name, value)
        result = runner.invoke(
            app, ["--data-dir", str(tmp_path / "data"), "search", "retry"], env={"COLUMNS": "400"}
        )
        said = " ".join(result.output.split())
        assert result.exit_code == 2 and f"error: bad setting: {name}: " in said, said
        assert accepted in said and "model" not in said and "Traceback" not in said, said
        monkeypatch.delenv(name)
    monkeypatch.setenv("FATHOM_LOCAL_DEVICE", "cuda:1")  # a numbered GPU is a device
    assert Settings().local_device == "cuda:1"


def test_the_models_table_keeps_each_name_whole_at_80_columns(tmp_path: Path):
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("FATHOM_")},
        "HF_HUB_OFFLINE": "1",
        "COLUMNS": "80",
    }

    def models(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "fathom", "--data-dir", str(tmp_path / "data"), "models", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    names = [e["name"] for e in json.loads(models("--json"))]
    assert names, "the install lists no model"
    table = models()
    lines = table.splitlines()
    for name in names:  # whole, on one line within the 80 columns
        assert any(name in line and len(line) <= 80 for line in lines), table
