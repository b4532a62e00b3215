"""Live sync through the real product: `watchfiles` on real folders, the real indexer, store
and MiniLM encoder. Edits, deletes, renames, a `git checkout` of a real repository and a
formatter-like burst; ignored paths; an encoder that goes away; searches during a sync; and
two servers on one PostgreSQL database syncing one project, one at a time."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from fathom.config import Settings
from fathom.errors import ProviderUnavailable
from fathom.index.chunking import chunk_file
from fathom.inference.provider import Provider
from fathom.roles import Role
from fathom.service import Fathom
from tests.index.retrieval_fixtures import write_project
from tests.index.watch_fixtures import OPTIONS, settled, syncs, wait_for

pytestmark = pytest.mark.slow


async def found(fathom: Fathom, query: str, symbol: str, project: str = "shop") -> bool:
    return any(h.symbol == symbol for h in await fathom.search(query, project, k=5))


def paths_indexed(fathom: Fathom, project: str = "shop") -> set[str]:
    return {e.path for t in ("code", "docs") for e in fathom.store.manifest(project, t)}


@pytest.fixture
async def watched(tmp_path, local_encoder):
    root = write_project(tmp_path / "shop")
    fathom = Fathom(Settings(data_dir=tmp_path / "data", watch=True), encoder=local_encoder)
    await fathom.index(root, "shop")
    await fathom.start_watching(**OPTIONS)
    await settled(fathom)
    yield fathom, root
    await fathom.aclose()


async def test_edits_deletes_and_renames_follow_without_a_reindex(watched):
    fathom, root = watched
    retry = root / "net" / "retry.py"
    with retry.open("a") as fh:
        fh.write(
            "\n\ndef compute_invoice_discount(total, rate):\n"
            '    """Take a percentage discount off an invoice total."""\n'
            "    return total * (1 - rate)\n"
        )
    await wait_for(
        lambda: found(fathom, "discount off an invoice total", "compute_invoice_discount"),
        what="the appended function in search results",
    )

    (root / "web" / "server.js").unlink()
    await wait_for(lambda: "web/server.js" not in paths_indexed(fathom), what="the deleted file gone")
    assert all(h.path != "web/server.js" for h in await fathom.search("greets visitors http", "shop"))

    await settled(fathom)
    before = len(syncs(fathom))
    (root / "auth" / "password.py").rename(root / "auth" / "hashing.py")
    await wait_for(
        lambda: (
            "auth/hashing.py" in paths_indexed(fathom) and "auth/password.py" not in paths_indexed(fathom)
        ),
        what="the rename",
    )
    await settled(fathom)
    jobs = syncs(fathom)[before:]
    # The renamed file's chunks kept their vectors: nothing was embedded for it.
    assert sum(j.report.embedded for j in jobs) == 0
    assert sum(j.report.carried for j in jobs) == len(
        [c for c in chunk_file("auth/hashing.py", (root / "auth" / "hashing.py").read_text())]
    )
    state = fathom.index_status("shop").watch
    assert state["enabled"] and state["state"] == "watching" and state["syncs"] >= 3


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
        env={
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
            "HOME": str(root),
            "PATH": "/usr/bin:/bin",
        },
    ).stdout


def chunk_texts(root: Path) -> set[tuple[str, str]]:
    """(table, text) of every chunk of the tracked Python files in a worktree."""
    out = set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        out |= {(c.table, c.text) for c in chunk_file(rel, path.read_text())}
    return out


async def test_a_git_checkout_is_one_job_that_embeds_only_what_differs(tmp_path, local_encoder):
    root = tmp_path / "repo"
    for i in range(40):
        write_project(
            root,
            {
                f"pkg/mod_{i:02d}.py": (
                    f'"""Module {i} of the sample package."""\n\n\n'
                    f'def step_{i}(state):\n    """Advance the state machine by step {i}."""\n'
                    f"    return state + {i}\n\n\n"
                    f"def undo_{i}(state):\n    return state - {i}\n"
                )
            },
        )
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "main")
    git(root, "checkout", "-q", "-b", "feature")
    for i in (3, 7, 11):  # three modules changed, one added, one deleted, one renamed
        p = root / "pkg" / f"mod_{i:02d}.py"
        p.write_text(p.read_text() + f"\n\ndef extra_{i}(state):\n    return state * {i}\n")
    (root / "pkg" / "added.py").write_text("def added(state):\n    return -state\n")
    (root / "pkg" / "mod_20.py").unlink()
    git(root, "mv", "pkg/mod_30.py", "pkg/renamed.py")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "feature")
    feature = chunk_texts(root)
    git(root, "checkout", "-q", "main")
    main = chunk_texts(root)

    fathom = Fathom(Settings(data_dir=tmp_path / "data", watch=True), encoder=local_encoder)
    try:
        await fathom.index(root, "repo")
        await fathom.start_watching(**OPTIONS)
        await settled(fathom, "repo")
        for branch, now, was in (("feature", feature, main), ("main", main, feature)):
            before = len(syncs(fathom, "repo"))
            git(root, "checkout", "-q", branch)
            await wait_for(lambda: len(syncs(fathom, "repo")) > before, what="a sync")
            await settled(fathom, "repo")
            jobs = syncs(fathom, "repo")[before:]
            assert len(jobs) == 1, [j.report for j in jobs]  # one job for the whole checkout
            report = jobs[0].report
            assert report.embedded == len(now - was) > 0  # only the chunks that differ
            assert report.carried >= 1  # the renamed module kept its vectors
            print(
                f"git checkout {branch}: 1 sync job, {report.embedded} embedded, "
                f"{report.carried} reused, {report.deleted} deleted of {report.chunks} chunks"
            )

        # A formatter-like burst over every file: still one job.
        before = len(syncs(fathom, "repo"))
        for path in sorted(root.rglob("*.py")):
            path.write_text(path.read_text().replace("    return", "    return "))
        await wait_for(lambda: len(syncs(fathom, "repo")) > before, what="a sync")
        await settled(fathom, "repo")
        jobs = syncs(fathom, "repo")[before:]
        assert len(jobs) == 1 and jobs[0].report.files == 40
    finally:
        await fathom.aclose()


async def test_a_burst_with_pauses_shorter_than_the_quiet_period_is_one_job(tmp_path, local_encoder):
    """Writes 0.15 s apart arrive as separate event batches (the watcher closes a batch after
    50 ms without events); the quiet period (1 s here) gathers them into one job."""
    root = write_project(tmp_path / "shop")
    fathom = Fathom(Settings(data_dir=tmp_path / "data", watch=True), encoder=local_encoder)
    try:
        await fathom.index(root, "shop")
        await fathom.start_watching(**(OPTIONS | {"quiet_s": 1.0}))
        await settled(fathom)
        before = len(syncs(fathom))
        batches = fathom.watcher.syncs["shop"].events
        for i in range(6):
            (root / f"step_{i}.py").write_text(f"def step_{i}(x):\n    return x + {i}\n")
            await asyncio.sleep(0.15)
        await wait_for(lambda: len(syncs(fathom)) > before, what="a sync")
        await settled(fathom)
        assert fathom.watcher.syncs["shop"].events - batches >= 2  # several event batches...
        jobs = syncs(fathom)[before:]
        assert len(jobs) == 1 and jobs[0].report.embedded == 6  # ...one job
    finally:
        await fathom.aclose()


async def test_a_project_turned_off_elsewhere_stops_and_can_be_turned_on_again(watched):
    fathom, root = watched
    # Another process (the CLI on this data dir) turns the project's live sync off.
    fathom.records.update("shop", watch=False)
    (root / "one.py").write_text("def first_after_off():\n    return 1\n")
    await wait_for(lambda: fathom.watch_state("shop")["state"] == "off", what="the watch off")
    await asyncio.sleep(1.0)
    assert "one.py" not in paths_indexed(fathom)
    state = await fathom.set_watch("shop", True)  # on again, here: a catch-up sync first
    assert state["enabled"]
    await wait_for(lambda: "one.py" in paths_indexed(fathom), what="the catch-up sync")
    (root / "two.py").write_text("def second_after_on():\n    return 2\n")
    await wait_for(lambda: "two.py" in paths_indexed(fathom), what="a sync after turning it on")


async def test_ignored_and_skipped_paths_start_no_sync(watched):
    fathom, root = watched
    (root / ".gitignore").write_text("*.log\nbuild-out/\n")
    await settled(fathom)
    before = len(syncs(fathom))
    (root / "node_modules" / "lib").mkdir(parents=True)
    (root / "node_modules" / "lib" / "index.js").write_text("module.exports = 1\n")
    (root / "app.log").write_text("a log line\n")
    (root / "build-out").mkdir()
    (root / "build-out" / "gen.py").write_text("x = 1\n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\x00\x01")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    await asyncio.sleep(2.0)  # well past the quiet period: nothing may have started
    assert len(syncs(fathom)) == before
    assert fathom.watch_state("shop")["pending"] == 0

    (root / "kept.py").write_text("def kept():\n    return 'indexed'\n")
    await wait_for(lambda: "kept.py" in paths_indexed(fathom), what="the kept file")
    await settled(fathom)
    assert len(syncs(fathom)) == before + 1
    assert not paths_indexed(fathom) & {"app.log", "build-out/gen.py", "node_modules/lib/index.js"}


class Switchable(Provider):
    """The in-process encoder behind a switch (the Provider cut-off): `down` makes it refuse
    like a process that went away; `hold` keeps an embed waiting until released."""

    def __init__(self, inner: Provider):
        self.inner, self.info = inner, inner.info
        self.down = False
        self.hold: asyncio.Event | None = None
        self.entered = asyncio.Event()
        self.load = getattr(inner, "load", None)

    @property
    def loaded(self) -> bool:
        return getattr(self.inner, "loaded", True)

    async def embed(self, texts):
        if self.down:
            raise ProviderUnavailable(f"{self.id} is not running")
        if self.hold is not None:
            self.entered.set()
            await self.hold.wait()
        return await self.inner.embed(texts)

    async def embed_query(self, query):
        return await self.inner.embed_query(query)


async def test_an_unavailable_encoder_makes_the_sync_wait_and_retry_never_drop(tmp_path, local_encoder):
    root = write_project(tmp_path / "shop")
    encoder = Switchable(local_encoder)
    fathom = Fathom(Settings(data_dir=tmp_path / "data", watch=True), encoder=encoder)
    try:
        await fathom.index(root, "shop")
        await fathom.start_watching(**OPTIONS)
        await settled(fathom)

        # The table's encoder is set to a model no connected provider serves: a sync fails at
        # once, keeps its change pending, and is retried.
        fathom.routing.update({Role.CODE_EMBEDDING: {"policy": "local", "model": "acme/absent-encoder"}})
        (root / "late.py").write_text("def reconcile_ledger_entries(ledger):\n    return sorted(ledger)\n")
        state = await wait_for(
            lambda: (s := fathom.watch_state("shop"))["state"] == "waiting" and s["syncs"] >= 1 and s,
            what="a failed sync waiting",
        )
        assert "acme/absent-encoder" in state["last_error"] and state["retry_at"]
        await asyncio.sleep(1.5)  # several retries fail meanwhile
        assert "late.py" not in paths_indexed(fathom)
        fathom.routing.update({Role.CODE_EMBEDDING: {"model": None}})
        await wait_for(
            lambda: found(fathom, "reconcile ledger entries", "reconcile_ledger_entries"),
            what="the change, once the encoder is back",
        )
        await settled(fathom)
        assert fathom.watch_state("shop")["last_error"] is None

        # The encoder process itself goes away mid-sync: the job waits in its pool (the
        # provider is ejected and re-probed), nothing is dropped, and it finishes once back.
        encoder.down = True
        (root / "later.py").write_text("def rotate_signing_keys(keys):\n    return keys[1:] + keys[:1]\n")
        await wait_for(lambda: fathom.watch_state("shop")["state"] == "syncing", what="a sync")
        await asyncio.sleep(1.0)
        assert "later.py" not in paths_indexed(fathom)
        encoder.down = False
        await wait_for(
            lambda: found(fathom, "rotate signing keys", "rotate_signing_keys"),
            timeout=120,
            what="the change, once the encoder answers again",
        )
    finally:
        await fathom.aclose()


async def test_searches_answer_from_the_active_index_while_a_sync_runs(tmp_path, local_encoder):
    root = write_project(tmp_path / "shop")
    encoder = Switchable(local_encoder)
    fathom = Fathom(Settings(data_dir=tmp_path / "data", watch=True), encoder=encoder)
    try:
        await fathom.index(root, "shop")
        await fathom.start_watching(**OPTIONS)
        await settled(fathom)
        encoder.hold = asyncio.Event()
        (root / "new.py").write_text("def archive_old_invoices(invoices):\n    return []\n")
        await asyncio.wait_for(encoder.entered.wait(), 60)  # the sync is embedding, held
        assert fathom.watch_state("shop")["state"] == "syncing"
        for _ in range(3):
            hits = await asyncio.wait_for(fathom.search("hash a password", "shop", k=3), 30)
            assert hits[0].path == "auth/password.py"
        encoder.hold.set()
        await wait_for(lambda: found(fathom, "archive old invoices", "archive_old_invoices"))
    finally:
        if encoder.hold is not None:
            encoder.hold.set()
        await fathom.aclose()


async def test_two_servers_on_one_database_sync_a_project_one_at_a_time(tmp_path, local_encoder, pg_url):
    """Each `Fathom` here is a server of its own (its own connections, data dir and watcher) on
    one PostgreSQL database. Both watch the folder; the project lock lets one sync at a time,
    the other waits and retries, and the edit is embedded once."""
    root = write_project(tmp_path / "shop")
    hold = asyncio.Event()
    servers = []
    for name in ("a", "b"):
        encoder = Switchable(local_encoder)
        servers.append(
            (
                Fathom(Settings(data_dir=tmp_path / name, store_url=pg_url, watch=True), encoder=encoder),
                encoder,
            )
        )
    try:
        await servers[0][0].index(root, "shop")
        await servers[1][0].index(root, "shop")  # records the root in b's data dir too
        for fathom, _ in servers:
            await fathom.start_watching(**OPTIONS)
        for fathom, _ in servers:
            await settled(fathom)
        for _, encoder in servers:
            encoder.hold = hold
        (root / "edit.py").write_text("def settle_partner_payouts(batch):\n    return len(batch)\n")
        await wait_for(lambda: any(e.entered.is_set() for _, e in servers), what="one embedding")
        holder = next(f for f, e in servers if e.entered.is_set())
        other = next(f for f, e in servers if f is not holder)
        # The other server tried, found the project locked, and waits to retry.
        state = await wait_for(
            lambda: (s := other.watch_state("shop"))["state"] == "waiting" and s,
            what="the other server waiting for the lock",
        )
        assert "another process is syncing it" in state["detail"]
        assert "being indexed" in state["last_error"]
        hold.set()
        for fathom, _ in servers:
            await wait_for(lambda f=fathom: found(f, "settle partner payouts", "settle_partner_payouts"))
        for fathom, _ in servers:
            await settled(fathom)
        embedded = [j.report.embedded for f, _ in servers for j in syncs(f) if j.report]
        assert sum(embedded) == len(chunk_file("edit.py", (root / "edit.py").read_text()))
    finally:
        hold.set()
        for fathom, _ in servers:
            await fathom.aclose()
