"""`--log-format json`: one JSON object per line from the server and the sidecar, with the same
secret scrubbing as the text format."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from fathom import logsafe
from tests.fleet.canary_fixtures import POSTER, Canary
from tests.fleet.fleet_fixtures import (
    ADMIN,
    JOIN,
    PY,
    ProcessGroup,
    free_port,
    spawn_emulator,
    spawn_sidecar,
    wait_http,
    wait_until,
)

MINILM = "sentence-transformers/all-minilm-l6-v2"


def test_a_json_line_carries_the_record_scrubbed_and_its_traceback_on_one_line():
    key = "sk-or-v1-" + "c0ffee" * 10
    try:
        raise RuntimeError(f"upstream said no to {key}\nsecond line")
    except RuntimeError:
        record = logging.LogRecord("fathom.test", logging.ERROR, __file__, 1, "refused %s", (key,), None)
        import sys

        record.exc_info = sys.exc_info()
    line = logsafe.JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "ERROR" and entry["logger"] == "fathom.test"
    assert entry["message"] == "refused sk-or-***" and "RuntimeError" in entry["exc"]
    assert key not in line and entry["ts"].endswith("+00:00")
    with pytest.raises(ValueError, match="text or json"):
        logsafe.configure("INFO", "yaml")


def _json_lines(text: str, who: str) -> list[dict]:
    entries = []
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                entries.append(json.loads(line))
            except ValueError:
                raise AssertionError(f"{who} line {n} is not JSON: {line[:200]!r}") from None
    return entries


@pytest.mark.slow
def test_server_and_sidecar_log_json_lines_without_the_canary_key(tmp_path: Path):
    canary = Canary()
    group = ProcessGroup(tmp_path / "logs")
    emu_port, port = free_port(), free_port()
    server_err = tmp_path / "server.stderr"
    with open(tmp_path / "server.stdout", "w") as out, open(server_err, "w") as err:
        server = subprocess.Popen(
            [
                PY,
                "-m",
                "fathom.server",
                "--port",
                str(port),
                "--data-dir",
                str(tmp_path / "data"),
                "--log-level",
                "DEBUG",
                "--log-format",
                "json",
                "--no-watch",
            ],
            stdout=out,
            stderr=err,
            start_new_session=True,
            env={
                "PATH": "/usr/bin:/bin",
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "FATHOM_ADMIN_TOKEN": ADMIN,
                "FATHOM_JOIN_TOKEN": JOIN,
                "PYTHONUNBUFFERED": "1",
            },
        )
    url = f"http://127.0.0.1:{port}"
    admin = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120)
    try:
        spawn_emulator(group, emu_port)
        wait_http(url + "/health")
        sidecar = spawn_sidecar(
            group,
            "sc-1",
            port,
            [],
            log_level="DEBUG",
            extra=["--openrouter-url", f"http://127.0.0.1:{emu_port}/api/v1", "--log-format", "json"],
        )
        wait_until(
            lambda: any(
                s["name"] == "sc-1" and s["connected"] for s in admin.get("/admin/fleet").json()["sidecars"]
            ),
            "the sidecar",
            procs=[sidecar],
        )
        assert admin.post("/admin/fleet/sc-1/approve").status_code == 200
        r = admin.put(
            "/admin/policies", json={"embedding": {"policy": "cloud", "model": MINILM, "upstream": "alpha"}}
        )
        assert r.status_code == 200, r.text
        # The key is joined only in a poster process: this one never holds it whole.
        poster = subprocess.run(
            [PY, "-c", POSTER, url, ADMIN],
            capture_output=True,
            text=True,
            timeout=120,
            env={"K1": canary.h1, "K2": canary.h2, "PATH": "/usr/bin:/bin"},
        )
        assert poster.stdout.startswith("200") and '"acked":["sc-1"]' in poster.stdout, (
            poster.stdout + poster.stderr
        )
        cloud = "sidecar:sc-1:embedding:cloud:alpha"
        wait_until(
            lambda: (
                admin.post("/admin/fleet/probe", json={"provider": cloud, "texts": ["x"]}).status_code == 200
            ),
            "a call through the key",
            procs=[sidecar],
        )
    finally:
        admin.close()
        server.terminate()
        server.wait(timeout=30)
        group.stop()
    logs = {"server": server_err.read_text(), "sidecar": sidecar.output()}
    for who, text in logs.items():
        entries = _json_lines(text, who)
        assert {"ts", "level", "logger", "message"} <= set(entries[0]), entries[0]
        assert any(e["level"] == "DEBUG" for e in entries), who  # DEBUG, where a leak would be
        assert not canary.in_text(text), who
        assert JOIN not in text and ADMIN not in text, who
    assert any("config push (with key)" in e["message"] for e in _json_lines(logs["server"], "server"))
    assert any("key held" in e["message"] for e in _json_lines(logs["sidecar"], "sidecar"))


def test_configure_keeps_other_handlers_and_writes_to_stderr_as_it_is_now(capsys):
    """A server or sidecar started in-process (a CLI test, an embedding program) must not take
    the root's other handlers away, nor keep writing to a stderr that was swapped and closed."""
    import io
    import logging

    root = logging.getLogger()
    other = logging.StreamHandler(io.StringIO())
    root.addHandler(other)
    level = root.level
    try:
        logsafe.configure("INFO", "text")
        logsafe.configure("WARNING", "json")
        ours = [h for h in root.handlers if h is logsafe._handler]
        assert other in root.handlers and len(ours) == 1
        swapped = io.StringIO()
        real, sys.stderr = sys.stderr, swapped
        try:
            logging.getLogger("fathom.test").warning("to the stderr of now")
        finally:
            sys.stderr = real
        assert json.loads(swapped.getvalue().splitlines()[0])["message"] == "to the stderr of now"
        swapped.close()
        logging.getLogger("fathom.test").warning("the old stream is closed")  # no logging error
        assert "Logging error" not in capsys.readouterr().err
    finally:
        root.removeHandler(other)
        if logsafe._handler is not None:
            root.removeHandler(logsafe._handler)
            logsafe._handler = None
        root.setLevel(level)
