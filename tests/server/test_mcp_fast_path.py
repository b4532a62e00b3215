"""`fathom mcp`'s fast path: a spawned session relays to the background Fathom without importing
the command line (typer, rich, the pydantic settings, the command groups), and the daemon it
spawns starts without the command groups and typer; everything else
(`--help`, an unknown option) still goes through the full app, as before.

Real processes: `python -m fathom.cli ... mcp` spawned as a host spawns it, with
PYTHONPROFILEIMPORTTIME so the test reads what it (and the daemon it starts, which the `shop`
fixture stops) imported. The settings the fast path reads are compared with `Settings`' own.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fathom.cli.launch import bridge_request, session_settings
from fathom.config import Settings
from fathom.local_server import DAEMON_FILE
from fathom.server.bridge import DAEMON_LOG
from tests.server.daemon_fixtures import ENV, RawHost

COMMAND_LINE = ("typer", "rich", "click", "pydantic_settings", "fathom.config", "fathom.cli.commands")
# The command groups and the plumbing they share: the daemon a session starts needs none of them.
COMMAND_GROUPS = {
    "fathom.cli.commands",
    "fathom.cli.core",
    "fathom.cli.admin",
    "fathom.cli.operator",
    *(
        f"fathom.cli.{group}"
        for group in ("policy", "key", "fleet", "gate", "budget", "jobs", "tokens", "audit")
    ),
}


def imported(err: str) -> set[str]:
    """The modules a `python -X importtime` process imported, from its stderr."""
    return {line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if line.startswith("import time:")}


def fathom_cli(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "fathom.cli", "--data-dir", str(data), *args],
        input="",
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
async def test_a_session_answers_through_the_fast_path_without_the_command_line(shop, tmp_path):
    data, _, seen = shop
    # Inherited by the daemon the session starts: its log lists its imports too.
    raw = RawHost(data, tmp_path, env={"PYTHONPROFILEIMPORTTIME": "1"})
    try:
        async with asyncio.timeout(240):
            await asyncio.to_thread(raw.start)
            assert (await asyncio.to_thread(raw.search, 2, "hash a password"))[0][
                "path"
            ] == "auth/password.py"
    finally:
        raw.close()
    err = raw.err.read_text()
    assert "fathom mcp: attached to the background Fathom (pid" in err, err
    assert not imported(err) & set(COMMAND_LINE), sorted(imported(err) & set(COMMAND_LINE))
    # The daemon it started came up without the command groups (`fathom daemon`'s fast path)
    # and without the command line's framework (its socket comes from `server.connections`).
    log = (data / DAEMON_LOG).read_text()
    assert "fathom daemon (pid" in log, log[-2000:]
    assert not imported(log) & COMMAND_GROUPS, sorted(imported(log) & COMMAND_GROUPS)
    assert not imported(log) & {"typer", "fathom.server.__main__"}, sorted(imported(log))


def test_help_and_unknown_options_go_through_the_full_app(tmp_path):
    data = tmp_path / "data"
    helped = fathom_cli(data, "mcp", "--help")
    assert helped.returncode == 0 and "--in-process" in helped.stdout and "--no-watch" in helped.stdout
    assert "typer" in imported(helped.stderr)
    refused = fathom_cli(data, "mcp", "--bogus")
    assert refused.returncode == 2 and "No such option: --bogus" in refused.stderr, refused.stderr
    # Neither tried to reach a background Fathom: the full app refused or helped first.
    for done in (helped, refused):
        assert "fathom mcp:" not in done.stderr
    assert not (data / DAEMON_LOG).exists() and not (data / DAEMON_FILE).exists()


def test_the_fast_path_takes_only_the_options_it_serves():
    assert bridge_request(["mcp"]) == (None, False)
    assert bridge_request(["--data-dir", "/d", "mcp", "--no-watch"]) == (Path("/d"), True)
    assert bridge_request(["mcp", "--data-dir=/d"]) == (Path("/d"), False)
    for argv in (
        ["mcp", "--in-process"],
        ["mcp", "--help"],
        ["--help"],
        ["--version", "mcp"],
        ["--no-watch", "mcp"],  # not a global option: the full app says so
        ["--data-dir", "/a", "mcp", "--data-dir", "/b"],
        ["--data-dir", "mcp"],
        ["mcp", "extra"],
        ["search", "mcp"],
        [],
    ):
        assert bridge_request(argv) is None, argv


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"FATHOM_WATCH": "0", "FATHOM_DATA_DIR": "/tmp/x"},
        {"fathom_watch": "Yes", "FATHOM_MCP_IN_PROCESS": "1"},
        {"FATHOM_DAEMON_ANSWER_S": "2.5", "FATHOM_STOP_GRACE_S": "600"},
        {"FATHOM_DAEMON_ANSWER_S": "1e1", "FATHOM_STOP_GRACE_S": " 3"},
        {"FATHOM_WATCH": "maybe"},
        {"FATHOM_STOP_GRACE_S": "601"},
        {"FATHOM_DATA_DIR": ""},
    ],
)
def test_the_fast_path_reads_a_session_s_settings_as_settings_does(env, monkeypatch):
    """Each value it reads is the one `Settings` reads; one it is unsure of hands over (None)."""
    for key in [k for k in os.environ if k.lower().startswith("fathom_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    fast = session_settings(None)
    if fast is None:
        return
    settings = Settings()
    for field in ("data_dir", "watch", "mcp_in_process", "daemon_answer_s", "stop_grace_s"):
        assert getattr(fast, field) == getattr(settings, field), field


def test_the_fast_path_module_imports_no_command_line():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, fathom.cli.launch; print(' '.join(sorted(m for m in sys.modules)))",
        ],
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=60,
    )
    loaded = set(done.stdout.split())
    assert "fathom.cli.launch" in loaded and not loaded & {*COMMAND_LINE, "pydantic"}, sorted(
        loaded & {*COMMAND_LINE, "pydantic"}
    )


def test_the_spawned_daemon_refuses_a_bad_setting_as_the_full_app_does(tmp_path):
    """`fathom daemon`, as a bridge spawns it, says a refusal in the full app's words and code."""
    env = {**os.environ, **ENV, "FATHOM_DAEMON_ANSWER_S": "0"}
    full_app = "import sys; from fathom.cli import app; sys.argv[0] = 'fathom'; app()"
    said = [
        subprocess.run(
            [sys.executable, *how, "--data-dir", str(tmp_path / "data"), "daemon"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        for how in (["-m", "fathom"], ["-c", full_app])
    ]
    fast, full = ((done.returncode, done.stderr.strip().splitlines()[-1]) for done in said)
    assert fast == full and full[0] == 2 and "FATHOM_DAEMON_ANSWER_S" in full[1], said
