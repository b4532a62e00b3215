"""docs/operator.md, followed literally: every command of its console blocks, in order, against a
real server process, a real sidecar process (MiniLM in-process) and the OpenRouter stand-in
(the emulator). Each output is compared loosely with what the docs show: the words of each
shown line must be in the real output; ids, numbers, times and `…` are not compared.

The few substitutions are those any reader makes: this test's port, data dir, project folder
and key file for the docs' examples, the real tokens and job id for `fa_…`, `fj_…` and
`3f2a9c0b1d4e`, the emulator's model and upstream for the placeholders, `ws://` on
loopback for the docs' `wss://` proxy, and a bare repository over file:// (branches `main`,
`feature`, `release/2.0`) for the docs' git host. The CLI's default data dir is the server's,
as in the docs (`~/.fathom` both). A command this test cannot run here (an interactive
prompt, another host, a client outside Fathom) is listed in SKIPPED with the reason; any other
command the docs gain is run, so the docs cannot drift from the product unseen.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.fleet.fleet_fixtures import PY, ProcessGroup, free_port, spawn_emulator, wait_http, wait_until
from tests.server.admin_fixtures import make_project
from tests.service.git_fixtures import Remote

pytestmark = pytest.mark.slow

DOCS = Path(__file__).parents[2] / "docs" / "operator.md"
FATHOM = str(Path(PY).parent / "fathom")
MINILM = "sentence-transformers/all-minilm-l6-v2"
DOC_JOB = "3f2a9c0b1d4e"

# Commands the docs show that cannot run in this test, and why (matched by their start).
SKIPPED = {
    "fathom server --port 8765 --data-dir ~/.fathom --rotate-admin-token": "needs the running server stopped first (a rotation happens as a server starts)",
    "fathom key push\n": "an interactive hidden prompt",
    "fathom jobs pause": "the documented job finished already; pause, resume and cancel are tested in test_cli_admin",
    "fathom jobs resume": "as above",
    "fathom jobs cancel": "as above",
    "claude mcp add": "a client outside Fathom (tested in test_mcp_clients)",
    "fathom server --host 127.0.0.1 --port 8765 --forwarded-allow-ips": "a second server on the walkthrough's port (forwarded addresses are tested in "
    "test_server_hostile_clients and test_fleet_hostile)",
}
# A block that shows another situation than the walkthrough's (another host claiming a name).
SKIPPED_OUTPUT = {
    "gpu-1    pending  yes  -  …  gpu-1: a different host claims this name; sidecar gpu-1 is offline"
}


@dataclass
class Step:
    command: str
    shown: list[str] = field(default_factory=list)


def documented_steps() -> list[Step]:
    """The console blocks of the docs: each `$ ` (or `host$ `) line a command (a trailing `\\`
    continues it), the lines after it what the docs show it printing."""
    steps: list[Step] = []
    in_block = False
    for line in DOCS.read_text().splitlines():
        line = line.strip()  # a block inside a list item is indented
        if line.startswith("```"):
            in_block = line.strip() == "```console"
            continue
        if not in_block:
            continue
        m = re.match(r"^[\w-]*\$ (.*)$", line)
        if m:
            steps.append(Step(m.group(1)))
        elif steps and steps[-1].command.endswith("\\"):
            steps[-1].command = steps[-1].command[:-1].rstrip() + " " + line.strip()
        elif steps and line.strip():
            steps[-1].shown.append(line)
    for s in steps:
        s.command = re.sub(r"\s+#.*$", "", s.command).strip()  # a comment is not part of it
    return steps


def words(text: str) -> list[str]:
    """The words worth comparing: no ids, numbers, times, tokens, `…` or table borders."""
    out = []
    for w in re.split(r"[\s│┃┏┓┗┛━─┡┩╇┼┃|]+", text):
        w = w.strip("…,;:()`'\"")
        if not w or "…" in w or re.search(r"\d", w) or re.match(r"^f[ajhms]_", w):
            continue
        out.append(w)
    return out


def check_shown(step: Step, output: str, subs: dict[str, str]) -> None:
    got = set(words(output))
    for line in step.shown:
        if line.strip() in SKIPPED_OUTPUT:
            continue
        for doc, real in subs.items():
            line = line.replace(doc, real)
        missing = [w for w in words(line) if w not in got]
        assert not missing, (
            f"`{step.command}` does not print what docs/operator.md shows:\n  shown: {line}\n"
            f"  missing words: {missing}\n  real output:\n{output}"
        )


FEATURE_ONLY = "retry_upload"


def make_remote(root: Path) -> Path:
    """The docs' `billing` repository: `feature` adds a function `main` lacks; `release/2.0` is cut
    from `main`. Returns the folder the docs' git host stands for."""
    remote = Remote(root)
    remote.commit({"app.py": 'def add(a, b):\n    """Add two numbers."""\n    return a + b\n'})
    remote.branch("release/2.0")
    remote.branch("feature", "main")
    remote.commit(
        {
            "upload.py": f"def {FEATURE_ONLY}(send, attempts=3):\n"
            '    """Retry the upload until it succeeds or the attempts run out."""\n'
            "    for _ in range(attempts):\n        if send():\n            return True\n"
            "    return False\n"
        },
        branch="feature",
    )
    (root / "billing.git").symlink_to(remote.bare)
    return root


def test_the_operator_walkthrough_runs_as_documented(tmp_path: Path):
    steps = documented_steps()
    assert len(steps) > 20, "the docs' console blocks were not found"
    group = ProcessGroup(tmp_path / "logs")
    port, emu_port = free_port(), free_port()
    data, project = tmp_path / "fathom-data", make_project(tmp_path / "src" / "api")
    key_file = tmp_path / "openrouter-key"
    key_file.write_text("sk-or-v1-" + "5eed" * 16 + "\n")
    remotes = make_remote(tmp_path / "remotes")
    subs = {
        "/home/you/.fathom": str(data),
        "~/.fathom": str(data),
        "8765": str(port),
        "wss://fathom.example.net": f"ws://127.0.0.1:{port}",
        "~/.secrets/openrouter": str(key_file),
        "/home/you/src/api": str(project),
        "~/src/api": str(project),
        "<openrouter-model-id>": MINILM,
        "<openrouter-provider-slug>": "alpha",
        "https://git.example.com/team/": remotes.as_uri() + "/",
    }
    env = {
        **os.environ,
        "COLUMNS": "250",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "NO_COLOR": "1",
        "FATHOM_DATA_DIR": str(data),
    }
    env.pop("FATHOM_SERVER", None)
    env.pop("FATHOM_ADMIN_TOKEN", None)
    ran: list[str] = []
    try:
        spawn_emulator(group, emu_port)
        for step in steps:
            command = step.command
            for doc, real in subs.items():
                command = command.replace(doc, real)
            if any((step.command + "\n").startswith(s) for s in SKIPPED):
                continue
            ran.append(step.command)
            if command.startswith("fathom server"):
                # As from a shell: the server inherits what was exported before it (git settings).
                server = group.spawn("server", [FATHOM, *shlex.split(command)[1:], "--no-watch"], env=env)
                wait_http(f"http://127.0.0.1:{port}/health", proc=server)
                wait_until(
                    lambda: "fathom server on" in server.output(), "the server's first lines", procs=[server]
                )
                output = server.output()
                subs["fa_…"] = re.search(r"admin token \(shown once\): (fa_\S+)", output).group(1)
                subs["fj_…"] = re.search(r"join token \(shown once\): (fj_\S+)", output).group(1)
                check_shown(step, output, subs)
                continue
            if command.startswith("export "):
                name, _, value = command[len("export ") :].partition("=")
                for doc, real in subs.items():
                    value = value.replace(doc, real)
                env[name] = " ".join(shlex.split(value))  # as a shell reads the quotes
                continue
            if command.startswith("fathom sidecar"):
                # The docs' sidecar, with this test's stand-in for OpenRouter and its own state dir.
                sidecar = group.spawn(
                    "sidecar",
                    [
                        FATHOM,
                        *shlex.split(command)[1:],
                        "--heartbeat",
                        "0.5",
                        "--openrouter-url",
                        f"http://127.0.0.1:{emu_port}/api/v1",
                    ],
                    env={
                        "FATHOM_SIDECAR_TOKEN": env["FATHOM_SIDECAR_TOKEN"],
                        "FATHOM_SIDECAR_STATE_DIR": str(tmp_path / "sidecar-state"),
                    },
                )
                admin = httpx.Client(
                    base_url=env["FATHOM_SERVER"],
                    headers={"Authorization": f"Bearer {env['FATHOM_ADMIN_TOKEN']}"},
                )
                wait_until(
                    lambda: admin.get("/admin/fleet").json()["sidecars"],
                    "the sidecar to connect",
                    procs=[sidecar],
                )
                admin.close()
                continue
            for doc, real in subs.items():
                command = command.replace(doc, real)
            stdin = None
            if " < " in command:
                command, _, source = command.partition(" < ")
                stdin = Path(source.strip()).read_text()
            argv = shlex.split(command)
            if argv[0] == "fathom":
                argv[0] = FATHOM
            done = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env, timeout=300)
            output = done.stdout + done.stderr
            check_shown(step, output, subs)
            if "refuse" in " ".join(step.shown) or any(s.startswith("error:") for s in step.shown):
                assert done.returncode != 0, f"`{step.command}` should have been refused:\n{output}"
            else:
                assert done.returncode == 0, f"`{step.command}` failed ({done.returncode}):\n{output}"
            if "--ref feature" in command:
                assert FEATURE_ONLY in output, f"the branch's own function was not found:\n{output}"
            job = re.search(r"started job (\w+)", output)
            if job:
                subs[DOC_JOB] = job.group(1)
    finally:
        group.stop()
    # The walkthrough did go through every part: server, sidecar, key, policy, gate, jobs, tokens.
    for part in (
        "fathom server --port 8765 --data-dir",
        "fathom sidecar",
        "fathom key push <",
        "fathom policy set code-embedding --policy cloud",
        "fathom gate verify",
        "fathom jobs start",
        "fathom tokens revoke",
        "fathom serve --no-auth --host 0.0.0.0",
        "fathom audit-log",
        "fathom projects add billing --git",
        "fathom projects sync billing",
    ):
        assert any(c.startswith(part) for c in ran), part
    # With FATHOM_SERVER exported, the git commands were done by the server, through its admin API.
    audited = (data / "audit.log").read_text()
    for done in (
        "POST /admin/projects/git",
        "POST /admin/projects/billing/branches",
        "DELETE /admin/projects/billing/branches/release/2.0",
        "POST /admin/projects/billing/sync",
    ):
        assert done in audited, done
