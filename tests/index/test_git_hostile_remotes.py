"""A git remote as an attack surface, through the real server on 127.0.0.1 (admin API, and the
operator's `fathom projects … --server`) and MCP over HTTP: a `file://` allow-list fooled by links, a repository that is a disk bomb, and the
modes of what a git project writes under the data dir.

The remotes are real repositories built with the `git` command line at test time; the server
is the assembled app (`create_app`) with a fast deterministic encoder.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from fathom.cli import app as cli
from fathom.config import Settings
from fathom.index.git_export import GitTooLarge
from tests.fleet.fleet_fixtures import ADMIN, serve_in_loop
from tests.server.admin_fixtures import AUTH, build_operator_app
from tests.server.data_dir_fixtures import wider_than_private
from tests.server.mcp_fixtures import create as create_token
from tests.server.mcp_fixtures import mcp as mcp_client
from tests.service.git_fixtures import Remote, git

OUTSIDE = "def outside_vault_function(code):\n    return code[::-1]\n"


def everything_written(data: Path) -> bytes:
    return b"".join(p.read_bytes() for p in data.rglob("*") if p.is_file() and not p.is_symlink())


def bare_repo_pointing_at(path: Path, commit: str) -> None:
    """A bare repository whose one branch names `commit`, an object it does not hold itself."""
    git("init", "--bare", "--quiet", "-b", "main", str(path))
    (path / "refs" / "heads" / "main").write_text(commit + "\n")


def planted(tmp_path: Path) -> tuple[Path, Remote, dict[str, str]]:
    """The allowed folder, a repository of its own inside it, and remotes named inside it that
    git would read from a repository outside it, one way each."""
    outside = Remote(tmp_path / "outside")
    commit = outside.commit({"vault.py": OUTSIDE}, "vault")
    allowed = tmp_path / "allowed"
    own = Remote(allowed / "own")
    own.commit({"app.py": "def own_function():\n    return 1\n"}, "own")
    (allowed / "link.git").symlink_to(outside.bare)
    (allowed / "through").symlink_to(outside.bare.parent)  # a link on the way, not at the end
    (allowed / "gitfile").mkdir()
    (allowed / "gitfile" / ".git").write_text(f"gitdir: {outside.work / '.git'}\n")
    bare_repo_pointing_at(allowed / "alternates.git", commit)
    (allowed / "alternates.git" / "objects" / "info" / "alternates").write_text(
        f"{outside.bare / 'objects'}\n"
    )
    bare_repo_pointing_at(allowed / "objects-link.git", commit)
    shutil.rmtree(allowed / "objects-link.git" / "objects")
    (allowed / "objects-link.git" / "objects").symlink_to(outside.bare / "objects")
    base = allowed.as_uri()
    return (
        allowed,
        own,
        {
            "a link": f"{base}/link.git",
            "a link on the way": f"{base}/through/remote.git",
            "a gitdir: file": f"{base}/gitfile",
            "objects/info/alternates": f"{base}/alternates.git",
            "a linked objects folder": f"{base}/objects-link.git",
        },
    )


@pytest.mark.slow
async def test_a_file_remote_leading_outside_the_allowed_folder_is_refused_at_add_and_at_sync(tmp_path):
    """FATHOM_GIT_REMOTES names `file:///…/allowed/`: a remote named inside it that git would
    read from elsewhere (a symbolic link, a `.git` file's `gitdir:`, `objects/info/alternates`,
    a linked `objects` folder) is refused by the admin API and by MCP `add_git_project`,
    naming the setting, and nothing of the repository outside reaches the data dir. A
    repository of the folder's own is added; once it is swapped for a link out, its sync is
    refused and the branch keeps serving what it indexed."""
    allowed, own, remotes = planted(tmp_path)
    data = tmp_path / "data"
    app = build_operator_app(data, settings=Settings(data_dir=data, git_remotes=allowed.as_uri() + "/"))
    service = app.state.service
    async with serve_in_loop(app) as url, httpx.AsyncClient(base_url=url, headers=AUTH, timeout=120) as admin:
        answers = {}
        for i, (how, remote) in enumerate(remotes.items()):
            answer = await admin.post(
                "/admin/projects/git", json={"name": f"x{i}", "url": remote, "branches": ["main"]}
            )
            answers[how] = (
                answer.status_code,
                answer.json().get("detail", {}).get("message", ""),
                service.records.get(f"x{i}") is None and not (data / "git" / f"x{i}").exists(),
            )
        refused = {
            how: code == 400 and "FATHOM_GIT_REMOTES" in said and "leads outside" in said and left
            for how, (code, said, left) in answers.items()
        }
        assert refused == dict.fromkeys(remotes, True), answers
        ops = await create_token(admin, "ops", None, can_index=True)
        async with mcp_client(url, ops) as client:
            for i, (how, remote) in enumerate(remotes.items()):
                added = await client.call_tool(
                    "add_git_project", {"project": f"mcp{i}", "url": remote, "branches": ["main"]}
                )
                refused[how] = added.is_error and "FATHOM_GIT_REMOTES" in added.content[0].text
        assert refused == dict.fromkeys(remotes, True)
        assert not any(service.records.get(f"mcp{i}") for i in range(len(remotes)))

        added = await admin.post(
            "/admin/projects/git", json={"name": "own", "url": own.file_url, "branches": ["main"]}
        )
        assert added.status_code == 200, added.text
        indexed = service.records.get("own")["git"]["branches"]["main"]
        own.bare.rename(allowed / "own" / "moved.git")
        own.bare.symlink_to(tmp_path / "outside" / "remote.git")
        synced = await admin.post("/admin/projects/own/sync")
        assert synced.status_code == 400 and "FATHOM_GIT_REMOTES" in synced.text, synced.text
        assert service.records.get("own")["git"]["branches"]["main"] == indexed
        hits = await service.search("own function", "own", k=3)
        assert hits and hits[0].symbol == "own_function"
    await service.aclose()
    assert b"outside_vault_function" not in everything_written(data)


@pytest.mark.slow
async def test_a_disk_bomb_writes_nothing_past_its_bounds_and_a_refusal_names_the_setting(tmp_path):
    """A repository of a few KB holding a 20 MiB file of zeros is added through the admin API
    with FATHOM_GIT_MAX_FILE_BYTES at 1 MiB: the file is never written (the branch's report
    counts and names it with the other too-large files), the rest is indexed. A commit whose
    files pass FATHOM_GIT_MAX_TREE_BYTES, and a fetch past FATHOM_GIT_MAX_FETCH_BYTES, are
    refused with the setting named and leave nothing behind; at a sync, a file grown past the
    bound is removed from the tree, and an over-size fetch leaves the branch serving. Every
    file and folder the git project wrote is private (0600/0700), whatever this process's
    umask."""
    remotes = tmp_path / "remotes"
    bomb, wide, dense = Remote(remotes / "bomb"), Remote(remotes / "wide"), Remote(remotes / "dense")
    bomb.commit(
        {
            "big/zeros.bin": "\0" * (20 << 20),
            "src/app.py": "def load_invoice(store, key):\n    return store[key]\n",
        },
        "bomb",
    )
    repeated = "".join(f"row {i:08d} of a file repeated under three names\n" for i in range(20_000))
    wide.commit({f"data/copy{i}.txt": repeated for i in range(3)}, "three copies")  # 3 x 1 MB
    (dense.work / "noise.bin").write_bytes(os.urandom(2 << 20))  # does not compress
    dense.commit({}, "noise")
    data = tmp_path / "data"
    settings = Settings(
        data_dir=data,
        git_remotes=remotes.as_uri() + "/",
        git_max_file_bytes=1 << 20,
        git_max_tree_bytes=2 << 20,
        git_max_fetch_bytes=1 << 20,
    )
    app = build_operator_app(data, settings=settings)
    service = app.state.service
    tree = data / "git" / "bomb" / "trees" / "main"
    async with serve_in_loop(app) as url, httpx.AsyncClient(base_url=url, headers=AUTH, timeout=120) as admin:
        added = await admin.post(
            "/admin/projects/git", json={"name": "bomb", "url": bomb.file_url, "branches": ["main"]}
        )
        assert added.status_code == 200, added.text
        report = added.json()["reports"]["main"]
        assert report["too_large"] == ["big/zeros.bin"] and report["skipped"]["too-large"] == 1, report
        assert (tree / "src" / "app.py").is_file() and not (tree / "big" / "zeros.bin").exists()
        assert sum(p.stat().st_size for p in data.rglob("*") if p.is_file()) < 8 << 20
        for name, remote, setting in (
            ("wide", wide, "FATHOM_GIT_MAX_TREE_BYTES"),
            ("dense", dense, "FATHOM_GIT_MAX_FETCH_BYTES"),
        ):
            refused = await admin.post(
                "/admin/projects/git", json={"name": name, "url": remote.file_url, "branches": ["main"]}
            )
            assert refused.status_code == 400 and setting in refused.text, (name, refused.text)
            assert service.records.get(name) is None and not (data / "git" / name).exists()

        # The operator's CLI, through the admin API: `fathom projects sync bomb --server URL`.
        def sync(code: int) -> str:
            done = CliRunner().invoke(
                cli,
                ["--data-dir", str(tmp_path / "cli"), "projects", "sync", "bomb", "--server", url],
                env={"FATHOM_ADMIN_TOKEN": ADMIN, "COLUMNS": "200"},
            )
            assert done.exit_code == code, done.output
            return " ".join(done.output.split())

        grown = bomb.commit({"src/app.py": "#" * (2 << 20)}, "grown")
        said = await asyncio.to_thread(sync, 0)
        assert "larger than FATHOM_GIT_MAX_FILE_BYTES not written out nor indexed: src/app.py" in said
        assert service.git.syncs.status("bomb")["last"]["result"]["branches"]["main"]["too_large"] == [
            "src/app.py"
        ]
        assert not (tree / "src" / "app.py").exists()  # the older version is gone with it
        (bomb.work / "noise.bin").write_bytes(os.urandom(2 << 20))
        bomb.commit({}, "noise")
        said = await asyncio.to_thread(sync, 2)
        assert "FATHOM_GIT_MAX_FETCH_BYTES" in said, said
        assert service.records.get("bomb")["git"]["branches"]["main"] == grown
        assert not list((data / "git" / "bomb" / "repo.git" / "objects" / "pack").glob("tmp_*"))
    await service.aclose()
    assert sum(p.stat().st_size for p in data.rglob("*") if p.is_file()) < 8 << 20
    assert wider_than_private(data / "git") == []


def test_what_git_reads_at_a_local_path_and_what_an_export_asks_git_for(tmp_path):
    """The parts under the two tests above: every planted remote reaches outside, a repository
    of the folder's own reaches nothing else (its hooks, which no fetch runs, aside); a
    commit's too-large files are excluded from the one archive of the whole commit, and left
    out of the literal paths of a diff's."""
    from urllib.parse import unquote, urlsplit

    from fathom.index.git_export import GitLimits, Plan
    from fathom.index.git_local import reach

    allowed, own, remotes = planted(tmp_path)
    outside = (tmp_path / "outside").resolve()
    for how, url in remotes.items():
        found = reach(unquote(urlsplit(url).path))
        assert any(p.is_relative_to(outside) for p in found.paths), (how, found)
    assert reach(str(own.bare)).paths == [own.bare.resolve()]
    assert reach(str(own.bare).removesuffix(".git")).git_dir == own.bare.resolve()  # git's suffixes
    shutil.rmtree(own.bare / "hooks", ignore_errors=True)
    (own.bare / "hooks").symlink_to(outside)
    assert reach(str(own.bare)).paths == [own.bare.resolve()]
    (own.bare / "packed-refs").symlink_to(outside / "remote.git" / "packed-refs")
    assert outside / "remote.git" / "packed-refs" in reach(str(own.bare)).paths

    listing = b"\x00".join(
        [
            b"100644 blob aaa      10\tsmall.py",
            b"100755 blob bbb 99999999\tbig.bin",
            b"160000 commit ccc       -\tsub",
            b"120000 blob ddd       8\tlink",
            b"",
        ]
    )
    plan = Plan.parse(listing, "c" * 40, GitLimits(max_file_bytes=1000, max_tree_bytes=20))
    assert plan.sizes == {"small.py": 10, "big.bin": 99999999, "link": 8}
    assert plan.too_large() == ["big.bin"]
    assert plan.pathspecs() == [[":(exclude,literal)big.bin"]]
    assert plan.pathspecs(["small.py", "big.bin", "gone.py"]) == [[":(literal)small.py"]]
    assert plan.pathspecs([]) == []
    plan.check("the remote")  # 18 bytes within the per-file bound
    with pytest.raises(GitTooLarge, match="FATHOM_GIT_MAX_TREE_BYTES=10"):
        Plan.parse(listing, "c" * 40, GitLimits(max_file_bytes=1000, max_tree_bytes=10)).check("r")
