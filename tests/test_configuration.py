"""docs/configuration.md, `Settings` and the source agree on every FATHOM_* variable."""

from __future__ import annotations

import re
from pathlib import Path

from fathom.config import Settings

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "configuration.md"
ROW = re.compile(r"^\|\s*`(FATHOM_[A-Z0-9_]+)`\s*\|([^|]*)\|([^|]*)\|\s*$")
# A full variable name; a prefix that a message completes (`FATHOM_LOCAL_{ROLE}_URL`) ends in `_`.
NAME = re.compile(r"FATHOM_[A-Z0-9_]*[A-Z0-9]\b(?!_)")


def documented() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in DOC.read_text().splitlines():
        m = ROW.match(line)
        if m:
            rows[m.group(1)] = (m.group(2).strip(), m.group(3).strip())
    return rows


def settings_variables() -> dict[str, object]:
    return {Settings.env_name(name): field for name, field in Settings.model_fields.items()}


def test_every_setting_is_documented_with_a_default_and_a_meaning():
    rows, fields = documented(), settings_variables()
    missing = sorted(set(fields) - set(rows))
    assert not missing, f"add a row to docs/configuration.md for: {', '.join(missing)}"
    stale = sorted(set(rows) - set(fields))
    assert not stale, f"docs/configuration.md lists variables Settings does not have: {', '.join(stale)}"
    empty = sorted(name for name, (default, meaning) in rows.items() if not default or not meaning)
    assert not empty, f"docs/configuration.md: give a default and a meaning for: {', '.join(empty)}"


def test_the_documented_defaults_are_the_models():
    rows = documented()
    wrong = []
    for var, field in settings_variables().items():
        default = field.default
        if var not in rows or field.default_factory is not None or default in (None, ""):
            continue  # no row (the test above names it), or a default the doc says in words
        text = str(default).lower() if isinstance(default, bool) else str(default)
        if f"`{text}`" not in rows[var][0]:
            wrong.append(f"{var} (the model's default is {text!r})")
    assert not wrong, f"docs/configuration.md shows another default for: {', '.join(wrong)}"


def test_every_variable_the_source_names_is_a_setting():
    """A `FATHOM_*` read anywhere (an `envvar=` of an option, a message naming one) is a field of
    Settings, so none is read by hand past the model and none is undocumented."""
    fields = settings_variables()
    strays = {}
    for path in sorted((ROOT / "src" / "fathom").rglob("*.py")):
        for name in NAME.findall(path.read_text()):
            if name not in fields:
                strays.setdefault(name, path.relative_to(ROOT).as_posix())
    assert not strays, "not in Settings (add the field and its row in docs/configuration.md): " + ", ".join(
        f"{name} in {where}" for name, where in sorted(strays.items())
    )


def test_no_module_reads_a_fathom_variable_by_hand():
    by_hand = re.compile(r"(environ(\.get)?\s*[\[(]|getenv\s*\()\s*[\"']FATHOM_")
    offenders = [
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "src" / "fathom").rglob("*.py")
        if by_hand.search(p.read_text())
    ]
    assert not offenders, f"read FATHOM_* through Settings instead, in: {', '.join(offenders)}"


def test_tokens_never_show_in_the_settings_repr(monkeypatch):
    monkeypatch.setenv("FATHOM_ADMIN_TOKEN", "fa_secret-value")
    monkeypatch.setenv("FATHOM_SIDECAR_TOKEN", "fj_secret-value")
    settings = Settings()
    assert Settings.secret(settings.admin_token) == "fa_secret-value"
    assert "secret-value" not in repr(settings) and "secret-value" not in str(settings.model_dump())


def test_a_malformed_variable_is_one_line_naming_it_never_its_value(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from fathom.cli import app
    from fathom.errors import ConfigError

    monkeypatch.setenv("FATHOM_LOCAL_WIDTH", "wide-secret-ish")
    try:
        Settings()
    except ConfigError as exc:
        assert "FATHOM_LOCAL_WIDTH" in str(exc) and "wide-secret-ish" not in str(exc)
    else:
        raise AssertionError("a malformed FATHOM_LOCAL_WIDTH was accepted")
    result = CliRunner().invoke(app, ["--data-dir", str(tmp_path), "projects"], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "error: bad setting: FATHOM_LOCAL_WIDTH" in result.output
    assert "Traceback" not in result.output and "wide-secret-ish" not in result.output


def test_the_server_refuses_a_malformed_variable_in_one_line(tmp_path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, FATHOM_MAX_BODY_BYTES="lots", FATHOM_DATA_DIR=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "fathom.server", "--port", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: bad setting: FATHOM_MAX_BODY_BYTES")
    assert "Traceback" not in proc.stderr and not list(tmp_path.iterdir())  # no token issued, nothing kept
