"""The data dir at rest: no other local user can read anything under it.

Real processes under a permissive umask (022, as a login shell has): a `fathom server` runs an
index job (LanceDB tables, job records, the audit log, tokens' hashes, the routing and gate
state) and adds a project from git through its admin API (git's bare clone, the files written
out of an archive whose modes are 0644/0755, the webhook secret), `fathom serve` starts and
stops (its token's hash), then `fathom index` indexes a second project into the same data dir;
after each process stops (before the next one's start would tighten what it left), a walk of
it finds no group or other bit on any folder or file, no file wider than 0600 and no folder
wider than 0700. A data dir an older release left 0755/0644 is tightened at the next
start, with one log line, without following a link out of it.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.fleet.fleet_fixtures import PY, ProcessGroup, free_port, wait_http, wait_until
from tests.server.admin_fixtures import make_project
from tests.server.data_dir_fixtures import wider_than_private
from tests.service.git_fixtures import Remote

ADMIN = "fa_data-at-rest-admin-VbQWf0i5FcCpIhUUA_LDGGOxLHZBgyIZ"
ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "FATHOM_WATCH": "0",
}


def under_umask_022(argv: list[str]) -> list[str]:
    """`argv` started from a shell with umask 022, whatever this test process's umask is: what
    Fathom makes private, it makes so itself."""
    return ["sh", "-c", 'umask 022 && exec "$@"', "sh", *argv]


def too_wide(root: Path) -> list[str]:
    """What `shared_paths` and `wider_than_private` find under `root`."""
    return sorted(set(shared_paths(root)) | set(wider_than_private(root)))


def shared_paths(root: Path) -> list[str]:
    """Every folder or file under `root` (itself included) with a group or other permission bit."""
    found = []
    for folder, _dirs, files in os.walk(root):
        for path in [folder, *(os.path.join(folder, f) for f in files)]:
            st = os.lstat(path)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
                found.append(f"{oct(stat.S_IMODE(st.st_mode))} {os.path.relpath(path, root)}")
    return found


@pytest.mark.slow
def test_an_index_through_the_server_and_the_cli_leaves_nothing_readable_by_others(tmp_path: Path):
    data = tmp_path / "data"
    api, web = make_project(tmp_path / "src" / "api"), make_project(tmp_path / "src" / "web")
    remote = Remote(tmp_path / "remote")
    (remote.work / "run.sh").write_text("#!/bin/sh\necho run\n")
    (remote.work / "run.sh").chmod(0o755)  # an executable: the archive says 0755
    remote.commit(
        {
            "src/shop/cart.py": "def add_to_cart(cart, item):\n    cart.append(item)\n",
            "README.md": "# Shop\n",
        },
        "first",
    )
    group = ProcessGroup(tmp_path / "logs")
    port = free_port()
    try:
        server = group.spawn(
            "server",
            under_umask_022([PY, "-m", "fathom.server", "--port", str(port), "--data-dir", str(data)]),
            env={**ENV, "FATHOM_ADMIN_TOKEN": ADMIN, "FATHOM_GIT_REMOTES": remote.file_url},
        )
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/health", proc=server)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60) as admin:
            job = admin.post("/admin/jobs", json={"path": str(api), "project": "api"})
            assert job.status_code == 202, job.text
            done = wait_until(
                lambda: (j := admin.get(f"/admin/jobs/{job.json()['id']}").json())["finished"] and j,
                "the index job",
                procs=[server],
            )
            assert done["state"] == "done", done
            # An MCP token (its hash) and an audit line: more files the server writes there.
            assert admin.post("/admin/tokens", json={"name": "alice"}).status_code in (200, 201)
            added = admin.post(
                "/admin/projects/git",
                json={"name": "shop", "url": remote.file_url, "branches": ["main"]},
                timeout=300,
            )
            assert added.status_code == 200, added.text
        group.stop()
        after = {"server": too_wide(data)}
        serve = group.spawn(
            "serve",
            under_umask_022(
                [PY, "-m", "fathom.cli", "--data-dir", str(data), "serve", "--port", str(free_port())]
            ),
            env=ENV,
        )
        wait_until(
            lambda: "fathom MCP (streamable HTTP) on" in serve.output(),
            "fathom serve to start",
            procs=[serve],
        )
        group.stop()
        after["serve"] = too_wide(data)
    finally:
        group.stop()
    cli = subprocess.run(
        under_umask_022(
            [PY, "-m", "fathom.cli", "--data-dir", str(data), "index", str(web), "--project", "web"]
        ),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **ENV},
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    written = {p.relative_to(data).parts[0] for p in data.rglob("*")}
    assert {"lance", "audit.log", "admin.json", "mcp_tokens.json", "git", "serve_token.json"} <= written, (
        written
    )
    assert len(list((data / "lance").rglob("*.lance"))) >= 3  # the three projects' tables are there
    assert (data / "git" / "shop" / "trees" / "main" / "run.sh").is_file()
    after["index"] = too_wide(data)
    assert after == {"server": [], "serve": [], "index": []}


def test_a_data_dir_left_readable_is_tightened_at_start_with_one_log_line(tmp_path: Path):
    data = tmp_path / "data"
    table = data / "lance" / "projects" / "api" / "code.lance"
    table.mkdir(parents=True)
    (table / "part-0.lance").write_bytes(b"indexed text")
    (data / "routing.json").write_text("{}")
    (data / "audit.log").write_text("")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "notes.txt").write_text("not Fathom's")
    (data / "link-to-outside").symlink_to(outside, target_is_directory=True)
    for path in [data, *data.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    os.chmod(outside, 0o755)
    os.chmod(outside / "notes.txt", 0o644)
    assert len(shared_paths(data)) == 8

    done = subprocess.run(
        under_umask_022([PY, "-m", "fathom.cli", "--data-dir", str(data), "projects"]),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **ENV},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert shared_paths(data) == []
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert stat.S_IMODE((table / "part-0.lance").stat().st_mode) == 0o600
    # A link is not followed: what it points at is not Fathom's to change.
    assert stat.S_IMODE(outside.stat().st_mode) == 0o755
    assert stat.S_IMODE((outside / "notes.txt").stat().st_mode) == 0o644
    said = [line for line in done.stderr.splitlines() if "took group and other access off" in line]
    assert len(said) == 1 and "off 8 path(s)" in said[0], done.stderr

    # Private already: the next start changes nothing and says nothing.
    again = subprocess.run(
        [PY, "-m", "fathom.cli", "--data-dir", str(data), "projects"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **ENV},
    )
    assert again.returncode == 0 and "took group and other access off" not in again.stderr
