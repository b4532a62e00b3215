"""What may be read, through the real server: the full app on a 127.0.0.1 socket, the MCP SDK's
client over streamable HTTP with scoped tokens, the admin API over HTTP, real `watchfiles`.

- a project folder swapped for a link to a folder outside `FATHOM_INDEX_ROOTS` stops its live
  sync with a clear state (MCP `index_status`, the admin project view); nothing from the outside
  folder is indexed or found;
- a token that may index indexes no other project's folder (its root, inside it, around it);
- `explore`'s file tools read only what the index would read, and never a huge file whole;
- a project a thousand folders deep indexes;
- the server's data dir inside a project is never indexed and its writes start no sync.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from fathom.config import Settings
from fathom.fleet.hub import Hub
from fathom.index import walker
from fathom.inference.provider import ChatResult
from fathom.inference.registry import ProviderRegistry
from fathom.roles import EMBEDDING_ROLES
from fathom.server.app import create_app
from fathom.service import Fathom
from tests.agents.agents_fixtures import LocalChat, tool_turn
from tests.fleet.fleet_fixtures import ADMIN, JOIN, HashEmbedder, serve_in_loop
from tests.fleet.fleet_fixtures import wait_for as shared_wait_for
from tests.inference.confinement_fixtures import index, mcp, token
from tests.server.admin_fixtures import METRICS, Operator, make_project

pytestmark = pytest.mark.slow


def build_app(data_dir: Path, *, chat: LocalChat | None = None, watch: bool = False) -> Any:
    """The operator app (as `admin_fixtures.build_operator_app`), with a scripted local chat
    model for the rlm role when `chat` is given (the rlm role's default route is local-only)
    and live sync when `watch`."""
    import dataclasses

    registry = ProviderRegistry()
    if chat is not None:
        registry.add(chat)
    hub = Hub(data_dir, registry=registry, join_tokens=(JOIN,))
    settings = Settings(data_dir=data_dir, watch=watch)
    encoder = HashEmbedder(width=8)
    encoder.info = dataclasses.replace(encoder.info, roles=frozenset(EMBEDDING_ROLES))
    service = Fathom(settings, encoder=encoder, registry=registry)
    return create_app(
        settings, registry=registry, hub=hub, admin_token=ADMIN, metrics_token=METRICS, service=service
    )


wait_for = functools.partial(shared_wait_for, timeout=30.0, interval=0.05)


def sync_of(op: Operator, project: str) -> Any:
    watcher = op.app.state.service.watcher
    return watcher.syncs.get(project) if watcher is not None else None


@pytest.fixture
async def roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Operator]:
    """The server with one allowed index root holding two projects, alpha and beta."""
    allowed = tmp_path / "allowed"
    make_project(allowed / "alpha")
    beta = make_project(allowed / "beta")
    (beta / "sub").mkdir()
    (beta / "sub" / "vault.py").write_text("def beta_vault_combination():\n    return 'beta only'\n")
    monkeypatch.setenv("FATHOM_INDEX_ROOTS", str(allowed))
    app = build_app(tmp_path / "data", watch=True)
    async with serve_in_loop(app) as url:
        op = Operator(url, app, tmp_path / "data", tmp_path)
        for name in ("alpha", "beta"):
            assert (await index(op, allowed / name, name))["state"] == "done"
        yield op


async def test_a_project_folder_swapped_for_a_link_outside_the_roots_stops_its_sync(roots: Operator):
    op, allowed = roots, roots.tmp / "allowed"
    outside = roots.tmp / "outside"
    outside.mkdir()
    (outside / "stolen.py").write_text("def outside_payroll_ledger():\n    return 'outside only'\n")
    await wait_for(
        lambda: (s := sync_of(op, "alpha")) is not None and s.state == "watching" and s.syncs >= 1,
        what="alpha watched",
    )
    reader = await token(op, "reader", ["alpha"])

    # The folder inside the roots becomes a link to a folder outside them; the old folder,
    # still watched under its old name, changes (so a sync is due at once).
    (allowed / "alpha").rename(allowed / "alpha-old")
    (allowed / "alpha").symlink_to(outside)
    with (allowed / "alpha-old" / "app.py").open("a") as fh:
        fh.write("\n\ndef touched():\n    return 1\n")

    await wait_for(lambda: sync_of(op, "alpha").state == "stopped", what="the sync stopped")
    async with mcp(op.url, reader) as client:
        status = await client.call_tool("index_status", {"project": "alpha"})
        assert not status.is_error, status.content[0].text
        watch = status.structured_content["watch"]
        assert watch["state"] == "stopped"
        assert (
            f"the project folder now resolves outside the index roots: {allowed / 'alpha'} leads to {outside}"
        ) in watch["detail"]
        assert "fix: put the project folder back" in watch["detail"]
        assert watch["last_error"] == watch["detail"]
        found = await client.call_tool("search_code", {"query": "outside_payroll_ledger", "k": 20})
        assert not found.is_error
        assert "outside_payroll_ledger" not in json.dumps(found.structured_content["results"])
        assert all(r["path"] != "stolen.py" for r in found.structured_content["results"])
    async with op.client() as admin:
        view = (await admin.get("/admin/projects")).json()
        alpha = next(p for p in view["projects"] if p["name"] == "alpha")
    assert alpha["watch"]["state"] == "stopped" and "outside the index roots" in alpha["watch"]["last_error"]
    # The project was not re-rooted, and nothing of the outside folder is in the index.
    assert alpha["root"] == str(allowed / "alpha")
    store = op.app.state.service.store
    paths = {e.path for t in ("code", "docs") for e in store.manifest("alpha", t)}
    assert "stolen.py" not in paths and "app.py" in paths
    # It stays stopped: more changes start no sync.
    done = sync_of(op, "alpha").syncs
    (outside / "more.py").write_text("def more():\n    return 2\n")
    await asyncio.sleep(1.0)
    assert sync_of(op, "alpha").syncs == done and sync_of(op, "alpha").state == "stopped"


async def test_a_token_that_may_index_indexes_no_other_projects_folder(roots: Operator):
    op, allowed = roots, roots.tmp / "allowed"
    bob = await token(op, "bob", ["alpha"], can_index=True)
    for name in ("alpha", "beta"):  # the live sync's first pass writes the records: let it end
        await wait_for(
            lambda n=name: (s := sync_of(op, n)) is not None and s.state == "watching" and s.syncs >= 1,
            what=f"{name} watched",
        )
    records = op.data_dir / "projects.json"
    before = records.read_text() if records.exists() else None
    beta_rows = op.app.state.service.store.table_info("beta", "code").rows
    async with mcp(op.url, bob) as client:
        for path, relation in (
            (allowed / "beta", "is the folder of"),
            (allowed / "beta" / "sub", "lies inside the folder of"),
            (allowed, "contains the folder of"),
        ):
            refused = await client.call_tool("index_project", {"path": str(path), "project": "alpha"})
            assert refused.is_error, path
            message = refused.content[0].text
            assert (
                f"refusing to index {path}: it {relation} another project, which this token "
                f"does not hold" in message
            ), message
            assert "beta" not in message.replace(str(allowed / "beta"), "")  # never named
            assert "--project PROJECT --can-index" in message
        # Nothing changed: alpha keeps its root, beta its rows, nothing of beta is in alpha.
        if before is not None:
            assert records.read_text() == before
        assert op.app.state.service.store.table_info("beta", "code").rows == beta_rows
        found = await client.call_tool("search_code", {"query": "beta_vault_combination", "k": 20})
        assert "beta_vault_combination" not in json.dumps(found.structured_content["results"])
        # Its own project's folder: indexed.
        done = await client.call_tool(
            "index_project", {"path": str(allowed / "alpha"), "project": "alpha", "wait": True}
        )
        assert not done.is_error, done.content[0].text
        assert done.structured_content["files"] == 2
    # The admin token is not restricted.
    admin_run = await index(op, allowed / "beta" / "sub", "beta-sub")
    assert admin_run["state"] == "done"


async def test_explore_reads_only_what_the_index_reads_and_never_a_huge_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    root = make_project(tmp_path / "proj")
    (root / ".env").write_text("DATABASE_PASSWORD=hunter2-env-value\n")
    (root / "server.pem").write_text(
        "-----BEGIN PRIVATE KEY-----\nMIIpemBodyValue\n-----END PRIVATE KEY-----\n"
    )
    (root / ".gitignore").write_text("local_settings.py\n")
    (root / "local_settings.py").write_text("TOKEN = 'gitignored-token-value'\n")
    (root / ".fathomignore").write_text("private/\n")
    (root / "private").mkdir()
    (root / "private" / "notes.md").write_text("fathomignored-notes-value\n")
    with (root / "huge.txt").open("wb") as fh:  # 1 GiB, sparse: no disk, all of it on read
        fh.truncate(1 << 30)
    reads = ["huge.txt", ".env", "server.pem", "local_settings.py", "private/notes.md", "app.py"]
    chat = LocalChat(
        [
            *(tool_turn("read_file", path=p) for p in reads),
            tool_turn("list_dir", path="."),
            tool_turn("list_dir", path="private"),
            tool_turn("grep", pattern="[Vv]alue"),
            ChatResult(content="Nothing secret here (app.py:1).", usage={"total_tokens": 10}),
        ]
    )
    bounded: list[tuple[int, int]] = []
    real_read = walker.read_regular

    def spy(path: Any, max_bytes: int, **kwargs: Any) -> bytes:
        if Path(path).name == "huge.txt":  # a name in its folder's descriptor (`dir_fd`)
            bounded.append((max_bytes, os.stat(path, dir_fd=kwargs.get("dir_fd")).st_size))
        return real_read(path, max_bytes, **kwargs)

    monkeypatch.setattr(walker, "read_regular", spy)
    app = build_app(tmp_path / "data", chat=chat)
    async with serve_in_loop(app) as url:
        op = Operator(url, app, tmp_path / "data", tmp_path)
        assert (await index(op, root, "proj"))["state"] == "done"
        reader = await token(op, "reader", ["proj"])
        tracemalloc.start()
        try:
            async with mcp(url, reader) as client:
                explored = await client.call_tool(
                    "explore", {"question": "what is secret?", "project": "proj", "max_steps": 12}
                )
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert not explored.is_error, explored.content[0].text
    trace = explored.structured_content["trace"]
    assert [t["tool"] for t in trace] == ["read_file"] * 6 + ["list_dir", "list_dir", "grep"]
    # Every refusal is the walker's: `.env` by its name (a credential file), the rest as a walk
    # leaves them out.
    assert [t["ok"] for t in trace[:6]] == [False, False, False, False, False, True]
    for step, why in zip(trace, ("too-large", "secret", "secret", "gitignored", "fathomignored")):
        assert why is None or f"({why})" in step["summary"], step
    assert not trace[7]["ok"] and "leaves out" in trace[7]["summary"]
    # What the model was shown: no secret, no excluded name in a listing, no grep hit in them.
    shown = json.dumps([m for request in chat.requests for m in request])
    secrets = ["MIIpem", "gitignored-token-value", "fathomignored-notes-value"]
    for secret in secrets + ["hunter2"]:
        assert secret not in shown, secret
    listing = next(
        m["content"]
        for request in chat.requests
        for m in request
        if m.get("role") == "tool" and str(m.get("content", "")).startswith("./\n")
    )
    hidden = {".env", "server.pem", "local_settings.py", "private/", ".gitignore", ".fathomignore"}
    assert "app.py" in listing and not hidden & set(listing.splitlines()[1:]), listing
    # The 1 GiB file: asked for at most the walker's limit, and never loaded.
    assert bounded and all(limit == walker.MAX_FILE_BYTES for limit, _ in bounded)
    assert peak < 64 << 20, f"{peak / 2**20:.0f} MiB allocated during the exploration"


async def test_a_project_a_thousand_folders_deep_indexes(operator: Operator):
    root = make_project(operator.tmp / "deep")
    folders = [root]
    try:
        for _ in range(1000):  # one level at a time: mkdir(parents=True) itself recurses
            folders.append(folders[-1] / "d")
            folders[-1].mkdir()
        (folders[-1] / "bottom.py").write_text("def at_the_very_bottom():\n    return 'deep'\n")
        job = await index(operator, root, "deep")
        assert job["state"] == "done", job
        store = operator.app.state.service.store
        paths = {e.path for e in store.manifest("deep", "code")}
        assert "/".join(["d"] * 1000) + "/bottom.py" in paths
    finally:  # bottom up: pytest's own clean-up (shutil.rmtree) recurses too
        (folders[-1] / "bottom.py").unlink(missing_ok=True)
        for folder in reversed(folders[1:]):
            folder.rmdir()


async def test_the_data_dir_inside_a_project_is_never_indexed_nor_starts_a_sync(tmp_path: Path):
    root = make_project(tmp_path / "proj")
    data = root / "fathom-data"
    # The project's own rules try to take it back: the data dir is not the project's to give.
    (root / ".fathomignore").write_text("!fathom-data/\n")
    app = build_app(data, watch=True)
    async with serve_in_loop(app) as url:
        op = Operator(url, app, data, tmp_path)
        assert (await index(op, root, "proj"))["state"] == "done"
        store = app.state.service.store
        paths = {e.path for t in ("code", "docs") for e in store.manifest("proj", t)}
        assert paths == {"app.py", "README.md"}, paths
        await wait_for(
            lambda: (s := sync_of(op, "proj")) is not None and s.syncs >= 1 and s.state == "watching",
            what="the first sync",
        )
        # The server writes its state (a token, the audit log, the project record) and indexes
        # again: none of it is a change of the project.
        await token(op, "someone", ["proj"])
        assert (await index(op, root, "proj"))["state"] == "done"
        settled = sync_of(op, "proj").syncs
        await asyncio.sleep(3.0)  # bounded: a loop on its own writes made ~1.4 syncs a second
        assert sync_of(op, "proj").syncs == settled, "the data dir's writes started syncs"
        # A real edit still syncs.
        (root / "extra.py").write_text("def extra_function():\n    return 3\n")
        await wait_for(lambda: sync_of(op, "proj").syncs > settled, what="a sync for a real edit")
        paths = {e.path for t in ("code", "docs") for e in store.manifest("proj", t)}
        assert paths == {"app.py", "README.md", "extra.py"}, paths
