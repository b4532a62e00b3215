"""Projects from git, branch by branch: real bare repositories served over file:// and over HTTP
(`git http-backend` on 127.0.0.1), the real MiniLM encoder, a real LanceDB store."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from pathlib import Path

import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from typer.testing import CliRunner

from fathom.cli import app
from fathom.config import Settings
from fathom.fleet.hub import Hub
from fathom.index.chunking import chunk_file, fit_tokens
from fathom.index.git_source import (
    GitAuthFailed,
    GitBranchMissing,
    GitRemoteInvalid,
    GitRemoteNotAllowed,
    GitUnreachable,
    check_remote,
    scrub,
)
from fathom.inference.registry import ProviderRegistry
from fathom.server.app import create_app
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom
from fathom.service.git_syncs import pushed_branch, signature_ok
from tests.fleet.fleet_fixtures import ADMIN, JOIN, serve_in_loop, wait_for
from tests.server.mcp_fixtures import create as create_token
from tests.server.mcp_fixtures import mcp as mcp_client
from tests.service.git_fixtures import FEATURE_FUNCTION, Remote, build_remote, git, http_remote, module_text


def size_of(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def settings_for(tmp_path: Path, remotes: str) -> Settings:
    return Settings(data_dir=tmp_path / "data", git_remotes=remotes)


def symbols(hits) -> set[str]:
    return {h.symbol for h in hits if h.symbol}


QUERY = "reconcile ledger entries with the bank statement"


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["file", "http"])
def test_two_branches_share_vectors_and_storage_and_search_by_ref(tmp_path, local_encoder, transport):
    remote = build_remote(tmp_path)
    with http_remote(tmp_path) as base:
        url = remote.file_url if transport == "file" else base + "remote.git"
        fathom = Fathom(settings_for(tmp_path, url.rsplit("/", 1)[0] + "/"), encoder=local_encoder)

        async def scenario():
            added = await fathom.git.add("shop", url, ["main"])
            one_branch = size_of(tmp_path / "data")
            tracked = await fathom.git.track("shop", "feature")
            two_branches = size_of(tmp_path / "data")
            at_feature = await fathom.search(QUERY, "shop", ref="feature", k=5)
            at_main = await fathom.search(QUERY, "shop", k=5)
            by_commit = await fathom.search(QUERY, "shop", ref=tracked["commit"], k=5)
            return added, tracked, one_branch, two_branches, at_feature, at_main, by_commit

        added, tracked, one, two, at_feature, at_main, by_commit = asyncio.run(scenario())
        await_close(fathom)
    assert added["reports"]["main"]["embedded"] == added["reports"]["main"]["chunks"] > 100
    assert "reconcile_ledger_entries" in symbols(at_feature)
    assert "reconcile_ledger_entries" not in symbols(at_main)
    assert symbols(by_commit) == symbols(at_feature)
    assert {h.commit for h in at_feature} == {tracked["commit"]}
    assert {h.commit for h in at_main} == {added["branches"]["main"]}
    # Only the chunks of payment.py whose text main does not have were embedded.
    tokens = local_encoder.token_counter()
    old = {
        c.content_hash for c in fit_tokens(chunk_file("shop/payment.py", module_text("payment")), tokens)[0]
    }
    new = fit_tokens(chunk_file("shop/payment.py", module_text("payment") + FEATURE_FUNCTION), tokens)[0]
    differing = [c for c in new if c.content_hash not in old]
    assert 0 < len(differing) < len(new)
    assert tracked["embedded"] == len(differing)
    assert tracked["carried"] == len(new) - len(differing)
    # Two branches that differ in one file cost less than 1.1x the storage of one.
    assert two < 1.1 * one, (one, two)


def await_close(fathom: Fathom) -> None:
    asyncio.run(fathom.aclose())


def sign(secret: str, body: bytes) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature-256": f"sha256={digest}"}


LOYALTY = {
    "shop/loyalty.py": '''
def apply_loyalty_bonus(customer, points):
    """Add bonus points to the customer's loyalty balance."""
    customer.points_balance += points * 2
    return customer.points_balance
'''
}
LOYALTY_QUERY = "apply a loyalty bonus to the customer's points balance"


@pytest.mark.slow
def test_a_sync_stopped_before_the_overlays_followed_main_is_completed_by_the_next(
    tmp_path, local_encoder, monkeypatch
):
    """The default branch moved and was saved, then re-basing `feature` on it failed: until
    the next sync, a search at `feature` would show main's new file as feature's. The next
    sync (main now unchanged) re-bases the overlay left behind."""
    from fathom.errors import FathomError

    remote = build_remote(tmp_path)
    fathom = Fathom(settings_for(tmp_path, remote.file_url), encoder=local_encoder)
    git = fathom.git

    async def scenario():
        await git.add("shop", remote.file_url, ["main", "feature"])
        pushed = remote.commit(LOYALTY, "loyalty")
        rebase = git._index_overlay

        async def fails(*args, **kwargs):
            raise FathomError("the encoder went away mid-sync")

        monkeypatch.setattr(git, "_index_overlay", fails)
        with pytest.raises(FathomError, match="went away"):
            await git.syncs.run("shop", None, "operator")
        failed = git.syncs.status("shop")["last"]
        monkeypatch.setattr(git, "_index_overlay", rebase)
        again = await git.syncs.run("shop", None, "operator")
        at_feature = await fathom.search(LOYALTY_QUERY, "shop", ref="feature", k=5)
        at_main = await fathom.search(LOYALTY_QUERY, "shop", k=5)
        ledger = await fathom.search(QUERY, "shop", ref="feature", k=5)
        tracked = dict(fathom.records.get("shop")["git"]["branches"])
        base = fathom.records.get("shop@feature")["overlay"]["base"]
        # A sync that waited behind an untrack of its branch does not bring the branch back.
        lock = git.lock("shop")
        async with lock:  # the waiters' order is the lock's queue (a private list, read only)
            untracking = asyncio.create_task(git.untrack("shop", "feature"))
            await wait_for(lambda: len(lock._waiters or ()) == 1, what="the untrack to wait")
            syncing = asyncio.create_task(git.syncs.run("shop", ["feature"], "webhook"))
            await wait_for(lambda: len(lock._waiters or ()) == 2, what="the sync to wait behind it")
        await untracking
        late = await syncing
        return pushed, failed, again, at_feature, at_main, ledger, late, tracked, base

    pushed, failed, again, at_feature, at_main, ledger, late, tracked, base = asyncio.run(scenario())
    await_close(fathom)
    assert late["branches"] == {} and list(fathom.records.get("shop")["git"]["branches"]) == ["main"]
    assert not fathom.store.has_project("shop@feature")
    assert failed["error"] == "the encoder went away mid-sync"
    assert tracked["main"] == pushed
    assert again["branches"]["main"] == {"commit": pushed, "unchanged": True}
    assert again["branches"]["feature"]["commit"] == tracked["feature"]
    assert base == pushed
    assert "apply_loyalty_bonus" in symbols(at_main)
    assert "apply_loyalty_bonus" not in symbols(at_feature)
    assert "reconcile_ledger_entries" in symbols(ledger)


async def synced(http: httpx.AsyncClient, auth: dict[str, str]) -> dict | None:
    """The project's sync status once its last sync has ended and none runs or waits."""
    status = (await http.get("/admin/projects/shop/sync", headers=auth)).json()
    done = (
        status["last"] and "finished_at" in status["last"] and not status["running"] and not status["queued"]
    )
    return status if done else None


@pytest.mark.slow
async def test_a_signed_push_webhook_makes_the_change_searchable_and_a_bad_one_changes_nothing(
    tmp_path, local_encoder
):
    """Over the real server on 127.0.0.1: the admin API adds the project, the forge's webhook
    route syncs a signed push and answers 401 to anything else, changing nothing."""
    remote = build_remote(tmp_path)
    settings = settings_for(tmp_path, remote.file_url)
    registry = ProviderRegistry()
    service = Fathom(settings, encoder=local_encoder, registry=registry)
    app = create_app(
        settings,
        registry=registry,
        hub=Hub(settings.data_dir, registry=registry, join_tokens=(JOIN,)),
        admin_token=ADMIN,
        service=service,
    )
    query = LOYALTY_QUERY
    async with serve_in_loop(app) as url, httpx.AsyncClient(base_url=url, timeout=120) as http:
        auth = {"Authorization": f"Bearer {ADMIN}"}
        assert (
            await http.post(
                "/admin/projects/git", json={"name": "shop", "url": remote.file_url, "branches": ["main"]}
            )
        ).status_code == 401
        added = (
            await http.post(
                "/admin/projects/git",
                headers=auth,
                json={"name": "shop", "url": remote.file_url, "branches": ["main", "feature"]},
            )
        ).json()
        secret = added["webhook_secret"]
        pushed = remote.commit(LOYALTY, "loyalty")
        body = json.dumps({"ref": "refs/heads/main", "after": pushed}).encode()
        for headers in (
            {},
            sign("not-the-secret", body),
            {"X-Gitlab-Token": "wrong"},
            {"X-Gitea-Signature": "0" * 64},
        ):
            refused = await http.post("/hooks/git/shop", content=body, headers=headers)
            assert refused.status_code == 401 and secret not in refused.text
        unknown = await http.post("/hooks/git/nothing", content=body, headers=sign(secret, body))
        assert unknown.status_code == 401
        before = await service.search(query, "shop", k=5)
        assert service.records.get("shop")["git"]["branches"]["main"] == added["branches"]["main"]
        # The forge gets its answer at once, while the sync cannot even start (the project's
        # lock is held here): the sync runs after the answer, and says so while it waits.
        async with service.git.lock("shop"):
            hooked = await http.post("/hooks/git/shop", content=body, headers=sign(secret, body), timeout=30)
            waiting = (await http.get("/admin/projects/shop/sync", headers=auth)).json()
        assert hooked.status_code == 202 and hooked.json()["queued"], hooked.text
        assert waiting["running"] and waiting["last"] is None
        status = await wait_for(lambda: synced(http, auth), timeout=120, what="the webhook's sync")
        assert status["last"]["trigger"] == "webhook" and "error" not in status["last"], status
        answer = status["last"]["result"]
        after = await service.search(query, "shop", k=5)
        at_feature = await service.search(query, "shop", ref="feature", k=5)
        searched = (
            await http.post(
                "/admin/search",
                headers=auth,
                json={"query": QUERY, "project": "shop", "ref": "feature", "k": 5},
            )
        ).json()
        again = (await http.post("/admin/projects/shop/sync", headers=auth)).json()
        dropped = await http.delete("/admin/projects/shop/branches/feature", headers=auth)
    await service.aclose()
    assert "reconcile_ledger_entries" in {r["symbol"] for r in searched["results"]}
    assert {r["commit"] for r in searched["results"]} == {added["branches"]["feature"]}
    assert all(b["unchanged"] for b in again["branches"].values())
    assert dropped.status_code == 200 and not service.store.has_project("shop@feature")
    assert "apply_loyalty_bonus" not in symbols(before)
    assert answer["branches"]["main"]["commit"] == pushed
    # Diff-driven: one file changed, and only its new function was embedded (its code chunk,
    # and its docstring in the docs table); nothing else of the project.
    assert answer["branches"]["main"]["files_changed"] == 1
    assert answer["branches"]["main"]["files"] == 1  # no full walk: only that file was read
    assert answer["branches"]["main"]["chunks"] == 2 and answer["branches"]["main"]["deleted"] == 0
    assert answer["branches"]["main"]["embedded"] == 2
    assert "apply_loyalty_bonus" in symbols(after)
    assert {h.commit for h in after} == {pushed}
    # The feature branch, re-based on the new main, still does not have the file (it was
    # never merged there): the overlay shadows it.
    assert "apply_loyalty_bonus" not in symbols(at_feature)
    assert {h.commit for h in at_feature} == {added["branches"]["feature"]}
    secret_file = tmp_path / "data" / "git" / "shop" / "webhook.secret"
    assert secret_file.stat().st_mode & 0o077 == 0
    log_text = "".join(p.read_text(errors="replace") for p in (tmp_path / "data").rglob("*.log"))
    assert secret not in log_text


@pytest.mark.slow
async def test_a_token_for_a_git_project_reads_its_branches_hits_and_nothing_else(tmp_path, local_encoder):
    """Over the real server and MCP over HTTP: a token scoped to a git project reads the lines
    of a hit on one of its branches (by id, by path, by resource link), while a token for
    another project cannot, and a folder project whose name only looks like a branch of it
    stays out of its sight (and a branch is not indexed under its name). No token (nor the
    operator) indexes a folder under the git project's name or a branch's: those follow the
    remote."""
    remote = build_remote(tmp_path)
    allowed = tmp_path / "allowed"
    (allowed / "lookalike").mkdir(parents=True)
    (allowed / "lookalike" / "vault.py").write_text(
        "def lookalike_vault_function(code):\n    return 'not shop ' + code\n"
    )
    (allowed / "mine").mkdir()
    (allowed / "mine" / "tool.py").write_text("def a_tool_of_mine():\n    return 1\n")
    settings = Settings(data_dir=tmp_path / "data", git_remotes=remote.file_url, index_roots=str(allowed))
    registry = ProviderRegistry()
    service = Fathom(settings, encoder=local_encoder, registry=registry)
    app = create_app(
        settings,
        registry=registry,
        hub=Hub(settings.data_dir, registry=registry, join_tokens=(JOIN,)),
        admin_token=ADMIN,
        service=service,
    )
    auth = {"Authorization": f"Bearer {ADMIN}"}
    payment = git("show", "feature:shop/payment.py", cwd=remote.work).splitlines()
    async with serve_in_loop(app) as url, httpx.AsyncClient(base_url=url, timeout=120, headers=auth) as admin:
        added = await admin.post(
            "/admin/projects/git",
            json={"name": "shop", "url": remote.file_url, "branches": ["main", "feature"]},
        )
        assert added.status_code == 200, added.text
        job = (
            await admin.post(
                "/admin/jobs", json={"path": str(allowed / "lookalike"), "project": "shop@lookalike"}
            )
        ).json()
        done = await wait_for(
            lambda: job_finished(admin, job["id"]), timeout=120, what="the look-alike folder's index"
        )
        assert done["state"] == "done", done
        over = await admin.post(
            "/admin/jobs", json={"path": str(allowed / "lookalike"), "project": "shop@feature"}
        )
        remote.branch("lookalike")
        taken = await admin.post("/admin/projects/shop/branches", json={"branch": "lookalike"})
        assert taken.status_code == 400 and "is taken by a project" in taken.text, taken.text
        alice = await create_token(admin, "alice", ["shop"], can_index=True)
        bob = await create_token(admin, "bob", ["other"])
        async with mcp_client(url, alice) as client:
            found = await client.call_tool(
                "search_code", {"query": QUERY, "project": "shop", "ref": "feature", "k": 5}
            )
            assert not found.is_error, found.content[0].text
            hit = next(
                r for r in found.structured_content["results"] if r["symbol"] == "reconcile_ledger_entries"
            )
            assert hit["project"] == "shop@feature"
            expected = payment[hit["start_line"] - 1 : hit["end_line"]]
            by_id = await client.call_tool("read_code", {"id": hit["id"]})
            assert not by_id.is_error, by_id.content[0].text
            assert [
                line.split("\t", 1)[1] for line in by_id.content[0].text.split("\n")[1:] if "\t" in line
            ] == expected
            assert (await client.read_resource(hit["uri"])).contents[0].text.split("\n") == expected
            by_path = await client.call_tool(
                "read_code",
                {
                    "project": "shop@feature",
                    "path": "shop/payment.py",
                    "start_line": hit["start_line"],
                    "end_line": hit["end_line"],
                },
            )
            assert not by_path.is_error, by_path.content[0].text
            assert [
                line.split("\t", 1)[1] for line in by_path.content[0].text.split("\n")[1:] if "\t" in line
            ] == expected
            listed = await client.call_tool("list_projects", {})
            names = {p["name"] for p in listed.structured_content["projects"]}
            assert names == {"shop", "shop@feature"}
            for tool, args in (
                ("read_code", {"project": "shop@lookalike", "path": "vault.py"}),
                ("search_code", {"query": "lookalike vault function", "project": "shop@lookalike"}),
            ):
                refused = await client.call_tool(tool, args)
                assert refused.is_error, (tool, refused)
                assert "lookalike_vault_function" not in json.dumps(refused.model_dump(mode="json"))
            for name in ("shop", "shop@feature"):
                indexed = await client.call_tool(
                    "index_project", {"path": str(allowed / "mine"), "project": name, "wait": True}
                )
                assert indexed.is_error and "comes from git" in indexed.content[0].text, indexed
        async with mcp_client(url, bob) as other:
            for args in ({"id": hit["id"]}, {"project": "shop@feature", "path": "shop/payment.py"}):
                refused = await other.call_tool("read_code", args)
                assert refused.is_error and "reconcile" not in refused.content[0].text, args
            with pytest.raises(MCPError) as unread:
                await other.read_resource(hit["uri"])
            assert "reconcile" not in str(unread.value)
    await service.aclose()
    assert over.status_code == 400 and "comes from git" in over.text, over.text
    assert "reconcile_ledger_entries" in symbols(await service.search(QUERY, "shop", ref="feature"))
    assert service.records.get("shop")["git"] and service.records.get("shop@feature")["overlay"]
    assert "lookalike" not in service.records.get("shop")["git"]["branches"]
    assert "overlay" not in service.records.get("shop@lookalike")


async def job_finished(admin: httpx.AsyncClient, job_id: str) -> dict | None:
    job = (await admin.get(f"/admin/jobs/{job_id}")).json()
    return job if job["finished"] else None


@pytest.mark.slow
def test_bad_remotes_give_typed_errors_and_leave_branches_serving(tmp_path, local_encoder):
    remote = build_remote(tmp_path)
    prefix = remote.file_url
    fathom = Fathom(settings_for(tmp_path, f"{prefix} http://127.0.0.1:9/"), encoder=local_encoder)

    async def scenario():
        await fathom.git.add("shop", remote.file_url, ["main"])
        errors = {}
        for label, call in {
            "invalid": lambda: fathom.git.add("x1", "not a url", ["main"]),
            "not allowed": lambda: fathom.git.add("x2", "https://elsewhere.example/r.git", ["main"]),
            "unreachable": lambda: fathom.git.add("x3", "http://127.0.0.1:9/nothing.git", ["main"]),
            "missing branch": lambda: fathom.git.track("shop", "no-such-branch"),
        }.items():
            try:
                await call()
            except Exception as exc:  # noqa: BLE001 - the type is what is checked
                errors[label] = exc
        hits = await fathom.search("create one invoice record", "shop", k=3)
        return errors, hits

    errors, hits = asyncio.run(scenario())
    assert isinstance(errors["invalid"], GitRemoteInvalid)
    assert isinstance(errors["not allowed"], GitRemoteNotAllowed)
    assert "FATHOM_GIT_REMOTES" in str(errors["not allowed"])
    assert isinstance(errors["unreachable"], GitUnreachable)
    assert isinstance(errors["missing branch"], GitBranchMissing)
    assert "no-such-branch" in str(errors["missing branch"])
    assert hits and "invoice" in hits[0].path
    names = {p.name for p in fathom.projects()}
    assert names == {"shop"}  # nothing was added by a refused call
    with http_remote(tmp_path, credentials=("alice", "s3cret-token")) as base:
        token_fathom = Fathom(
            Settings(
                data_dir=tmp_path / "data2",
                git_remotes=base,
                git_token="wrong-token-canary",
                git_username="alice",
            ),
            encoder=local_encoder,
        )
        with pytest.raises(GitAuthFailed) as bad:
            asyncio.run(token_fathom.git.add("priv", base + "remote.git", ["main"]))
        assert "wrong-token-canary" not in str(bad.value) and "FATHOM_GIT_TOKEN" in str(bad.value)
        written = b"".join(p.read_bytes() for p in (tmp_path / "data2").rglob("*") if p.is_file())
        assert b"wrong-token-canary" not in written and b"priv" not in written  # nothing was added
    # The right token clones a small private remote; once the token is wrong, a sync is
    # refused with the typed error and the indexed branch keeps serving.
    small = Remote(tmp_path / "private")
    small.commit({"vault.py": "def unseal_vault(key):\n    return key[::-1]\n"}, "vault")
    with http_remote(tmp_path / "private", credentials=("alice", "s3cret-token")) as base:
        data3 = tmp_path / "data3"
        good = Fathom(
            Settings(data_dir=data3, git_remotes=base, git_token="s3cret-token", git_username="alice"),
            encoder=local_encoder,
        )
        asyncio.run(good.git.add("priv", base + "remote.git", ["main"]))
        await_close(good)
        small.commit({"vault.py": "def reseal_vault(key):\n    return key\n"}, "reseal")
        wrong = Fathom(
            Settings(data_dir=data3, git_remotes=base, git_token="wrong-token-canary", git_username="alice"),
            encoder=local_encoder,
        )
        with pytest.raises(GitAuthFailed):
            asyncio.run(wrong.git.sync("priv"))
        hits = asyncio.run(wrong.search("unseal the vault", "priv", k=3))
        assert hits[0].symbol == "unseal_vault"
        await_close(wrong)
        written = b"".join(p.read_bytes() for p in data3.rglob("*") if p.is_file())
        sent = base64.b64encode(b"alice:s3cret-token")  # the header git sends
        assert b"s3cret-token" not in written and b"wrong-token-canary" not in written
        assert sent not in written
    await_close(fathom)


@pytest.mark.slow
def test_a_branch_a_failed_track_left_indexed_may_be_dropped_and_goes_with_its_project(
    tmp_path, local_encoder
):
    """A track that fails after its branch was indexed (the branch never recorded as tracked)
    leaves `NAME@BRANCH` behind: it is not refused as a tracked branch, a new track reuses it,
    and dropping the project takes it along. A name a folder project holds is refused."""
    from fathom.errors import ConfigError
    from fathom.service.git_projects import BranchDropRefused

    remote = build_remote(tmp_path)
    fathom = Fathom(settings_for(tmp_path, remote.file_url), encoder=local_encoder)
    indexed = fathom.index

    async def index_then_fail(tree, name, **options):
        report = await indexed(tree, name, **options)
        if "@" in name:
            raise ConfigError("the server stopped before the branch was recorded")
        return report

    async def scenario():
        await fathom.git.add("shop", remote.file_url, ["main", "feature"])
        with pytest.raises(BranchDropRefused):
            await fathom.drop("shop@feature")  # tracked: refused
        await fathom.git.untrack("shop", "feature")
        fathom.index = index_then_fail
        with pytest.raises(ConfigError, match="stopped before"):
            await fathom.git.track("shop", "feature")
        fathom.index = indexed
        assert "feature" not in fathom.records.get("shop")["git"]["branches"]
        assert fathom.store.has_project("shop@feature")  # left behind
        fathom.git.refuse_branch_drop("shop@feature")  # not tracked: may be dropped alone
        await fathom.git.track("shop", "feature")  # the leftover is this project's: reused
        assert "feature" in fathom.records.get("shop")["git"]["branches"]
        # A branch is never indexed under a name a folder project holds.
        folder = tmp_path / "depot-feature"
        folder.mkdir()
        (folder / "stock.py").write_text("def count_stock(depot):\n    return len(depot)\n")
        await fathom.index(folder, "depot@feature")
        with pytest.raises(ConfigError, match="'depot@feature' is taken by a project"):
            await fathom.git.add("depot", remote.file_url, ["main", "feature"])
        assert fathom.records.get("depot") is None and not fathom.store.has_project("depot")
        assert fathom.records.get("depot@feature")["root"] == str(folder)
        await fathom.drop("shop")
        await fathom.aclose()

    asyncio.run(scenario())
    assert not fathom.store.has_project("shop@feature")
    assert fathom.records.get("shop@feature") is None
    assert not (tmp_path / "data" / "git" / "depot" / "webhook.secret").exists()


def test_remote_urls_are_checked_and_scrubbed():
    allowed = ["https://git.example.com/team/"]
    assert check_remote("https://git.example.com/team/app.git", allowed)
    with pytest.raises(GitRemoteInvalid, match="FATHOM_GIT_TOKEN"):
        check_remote("https://bob:hunter2@git.example.com/team/app.git", allowed)
    with pytest.raises(GitRemoteNotAllowed):
        check_remote("https://git.example.com/other/app.git", allowed)
    with pytest.raises(GitRemoteInvalid):
        check_remote("ftp://git.example.com/team/app.git", ["ftp://"])
    assert "hunter2" not in scrub("fatal: https://bob:hunter2@host/x.git not found")


@pytest.mark.parametrize(
    "url, entry",
    [
        ("http://host/myteam/../attacker/evil.git", "http://host/myteam/"),
        ("http://host/myteam/%2e%2E/attacker/evil.git", "http://host/myteam/"),
        ("http://host/myteam/./x.git", "http://host/myteam/"),
        ("http://host/myteam\\..\\attacker/evil.git", "http://host/myteam/"),
        ("http://host/myteam/a%2F..%2Fb.git", "http://host/myteam/"),
        ("file:///srv/git/../etc/x.git", "file:///srv/git/"),
        ("git@host:myteam/../attacker/x.git", "git@host:myteam/"),
        ("ext::sh -c touch% /tmp/pwned", "ext::"),
        ("ext::ssh://host/x", "ext::"),
        ("git@-oProxyCommand=x:y", "git@-oProxyCommand=x:"),
    ],
)
def test_remotes_git_would_resolve_elsewhere_are_refused(url, entry):
    with pytest.raises(GitRemoteInvalid):
        check_remote(url, [entry])


@pytest.mark.parametrize(
    "url, entry, allowed",
    [
        ("https://github.com.evil.com/myteam/x.git", "https://github.com", False),
        ("https://github.com/myteam/x.git", "https://github.com", True),
        ("https://github.com/myteam/x.git", "https://github.com/myteam", True),
        ("https://github.com/myteamevil/x.git", "https://github.com/myteam", False),
        ("https://github.com/myteamevil/x.git", "https://github.com/myteam/", False),
        ("https://GitHub.com/myteam/x.git", "https://github.com/myteam/", True),
        ("https://github.com:8443/myteam/x.git", "https://github.com/myteam/", False),
        ("http://github.com/myteam/x.git", "https://github.com/myteam/", False),
        ("http://127.0.0.1:9/x.git", "http://127.0.0.1:9/", True),
        ("file:///srv/git/app.git", "file:///srv/git", True),
        ("file:///srv/gitevil/app.git", "file:///srv/git", False),
        ("git@github.com:myteam/x.git", "git@github.com:myteam", True),
        ("git@github.com:myteamevil/x.git", "git@github.com:myteam", False),
        ("git@github.com.evil.com:myteam/x.git", "git@github.com:myteam/", False),
        ("ssh://git@host/team/x.git", "ssh://host/team/", True),
        ("ssh://bob@host/team/x.git", "ssh://git@host/team/", False),
    ],
)
def test_the_allow_list_is_compared_host_and_folder_wise(url, entry, allowed):
    if allowed:
        assert check_remote(url, [entry]) == url
    else:
        with pytest.raises(GitRemoteNotAllowed):
            check_remote(url, [entry])


def test_webhook_signatures_of_each_forge():
    body = b'{"ref": "refs/heads/main"}'
    digest = hmac.new(b"s", body, hashlib.sha256).hexdigest()
    assert signature_ok("s", {"X-Hub-Signature-256": f"sha256={digest}"}, body)
    assert signature_ok("s", {"X-Gitea-Signature": digest}, body)
    assert signature_ok("s", {"X-Gitlab-Token": "s"}, body)
    assert not signature_ok("s", {"X-Hub-Signature-256": f"sha256={digest}"}, body + b" ")
    assert not signature_ok("s", {}, body)
    assert pushed_branch(body) == "main" and pushed_branch(b'{"ref": "refs/tags/v1"}') is None


@pytest.mark.slow
async def test_the_cli_and_the_mcp_tools_add_track_search_at_a_ref_and_untrack(
    tmp_path, local_encoder, monkeypatch
):
    remote = build_remote(tmp_path)
    settings = settings_for(tmp_path, remote.file_url)
    fathom = Fathom(settings, encoder=local_encoder)
    cli = CliRunner()

    def invoke(*args: str) -> str:
        result = cli.invoke(app, list(args), obj={"fathom": fathom}, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        return result.output

    # The CLI runs the service's coroutines on its own loop: a worker thread here.
    added = await asyncio.to_thread(
        invoke, "projects", "add", "shop", "--git", remote.file_url, "--branch", "main"
    )
    assert "webhook secret" in added and "main" in added
    listed = await asyncio.to_thread(invoke, "projects")
    assert "shop" in listed
    await asyncio.to_thread(invoke, "projects", "track", "shop", "feature")
    found = await asyncio.to_thread(invoke, "search", QUERY, "--project", "shop", "--ref", "feature")
    assert "reconcile_ledger_entries" in found
    commit = fathom.records.get("shop")["git"]["branches"]["feature"]
    assert commit[:12] in found
    per_chunk = await asyncio.to_thread(
        invoke, "search", QUERY, "--project", "shop", "--ref", "feature", "--group", "chunk"
    )
    assert "reconcile_ledger_entries" in per_chunk and commit[:12] in per_chunk

    async with Client(build_mcp_server(fathom)) as client:
        at_feature = await client.call_tool(
            "search_code", {"query": QUERY, "project": "shop", "ref": "feature", "k": 5}
        )
        assert not at_feature.is_error
        results = at_feature.structured_content["results"]
        assert "reconcile_ledger_entries" in {r["symbol"] for r in results}
        assert {r["commit"] for r in results} == {commit}
        at_main = await client.call_tool("search_code", {"query": QUERY, "project": "shop", "k": 5})
        assert "reconcile_ledger_entries" not in {r["symbol"] for r in at_main.structured_content["results"]}
        main_commit = fathom.records.get("shop")["git"]["branches"]["main"]
        assert {r["commit"] for r in at_main.structured_content["results"]} == {main_commit}
        missing = await client.call_tool(
            "search_code", {"query": QUERY, "project": "shop", "ref": "no-such-ref"}
        )
        assert missing.is_error and "track" in missing.content[0].text
        refused = await client.call_tool(
            "add_git_project", {"project": "other", "url": "https://elsewhere.example/x.git"}
        )
        assert refused.is_error and "FATHOM_GIT_REMOTES" in refused.content[0].text

    # A branch deleted on the remote is dropped by the next sync; the others keep serving.
    remote.branch("short")
    await asyncio.to_thread(invoke, "projects", "track", "shop", "short")
    assert "short" in fathom.records.get("shop")["git"]["branches"]
    git("push", "--quiet", "origin", "--delete", "short", cwd=remote.work)
    assert "deleted on the remote" in await asyncio.to_thread(invoke, "projects", "sync", "shop")
    assert "short" not in fathom.records.get("shop")["git"]["branches"]
    assert fathom.records.get("shop@short") is None
    assert "reconcile_ledger_entries" in symbols(await fathom.search(QUERY, "shop", ref="feature"))
    # A tracked branch's overlay is not dropped on its own (the next sync would bring it back).
    alone = await asyncio.to_thread(
        cli.invoke, app, ["drop", "shop@feature", "--yes"], obj={"fathom": fathom}, env={"COLUMNS": "200"}
    )
    assert alone.exit_code == 2 and "fathom projects untrack shop feature" in alone.output, alone.output
    assert fathom.store.has_project("shop@feature")
    await asyncio.to_thread(invoke, "projects", "untrack", "shop", "feature")
    assert not fathom.store.has_project("shop@feature")
    assert not (tmp_path / "data" / "git" / "shop" / "trees" / "feature").exists()
    remote.commit({"shop/refund.py": None}, "drop refunds")
    synced = await asyncio.to_thread(invoke, "projects", "sync", "shop")
    assert "main" in synced
    hits = await fathom.search("refund one record", "shop", k=10)
    assert all(h.path != "shop/refund.py" for h in hits)
    await asyncio.to_thread(invoke, "drop", "shop", "--yes")
    assert not (tmp_path / "data" / "git" / "shop").exists()
    await fathom.aclose()


def test_the_poll_loop_syncs_each_project_when_its_interval_has_passed(tmp_path, caplog):
    """The poll's timing runs on an injected clock; a sync that fails (an unreachable remote)
    is logged and retried at the project's next turn, and the others still run."""
    from types import SimpleNamespace

    from fathom.service.git_projects import GitProjects
    from fathom.service.projects import ProjectRecords

    now = [1000.0]
    records = ProjectRecords(tmp_path)
    service = SimpleNamespace(records=records, settings=Settings(data_dir=tmp_path, git_remotes="file://"))
    git = GitProjects(service, clock=lambda: now[0])
    gone = (tmp_path / "gone.git").as_uri()
    records.put(
        "polled", {"git": {"url": gone, "default": "main", "branches": {"main": "0" * 40}, "poll_s": 60.0}}
    )
    records.put(
        "hooked", {"git": {"url": gone, "default": "main", "branches": {"main": "0" * 40}, "poll_s": None}}
    )
    records.put("plain", {"root": str(tmp_path)})
    (tmp_path / "git" / "polled" / "repo.git").mkdir(parents=True)  # its clone, as `add` left it
    last: dict[str, float] = {}
    assert git.due(last) == ["polled"]
    assert asyncio.run(git.poll_once(last)) == []  # unreachable: logged, not raised
    assert last == {"polled": 1000.0} and "git sync of polled (poll) failed" in caplog.text
    assert "does not appear to be a git repository" in caplog.text  # git's reason, not its advice
    outcome = git.syncs.status("polled")["last"]
    assert outcome["trigger"] == "poll" and "gone.git" in outcome["error"] and "result" not in outcome
    assert "gone.git" in caplog.text and git.due(last) == []
    now[0] += 59.0
    assert git.due(last) == []
    now[0] += 1.0
    assert git.due(last) == ["polled"]


def test_a_link_out_of_the_tree_is_skipped_and_the_other_files_come(tmp_path):
    from fathom.index.git_source import Credentials, GitRepo

    remote = Remote(tmp_path)
    (remote.work / "src").mkdir()
    (remote.work / "src" / "escape").symlink_to("/etc/passwd")
    (remote.work / "src" / "up").symlink_to("../../../outside")
    commit = remote.commit({"src/app.py": "def run():\n    return 1\n"}, "links")
    repo = GitRepo(tmp_path / "clone.git", remote.file_url, Credentials())
    assert repo.fetch(["main"]) == {"main": commit}
    out = tmp_path / "tree"
    repo.export(commit, out)
    assert (out / "src" / "app.py").read_text().startswith("def run")
    assert not (out / "src" / "escape").exists() and not (out / "src" / "escape").is_symlink()
    assert not (out / "src" / "up").is_symlink()


@pytest.mark.parametrize("name", ["..", ".", ".hidden"])
def test_a_git_project_named_with_a_leading_dot_is_refused_and_never_reaches_the_data_folder(tmp_path, name):
    from types import SimpleNamespace

    from fathom.service.git_projects import GitProjects, UnsafeGitFolder
    from fathom.service.projects import ProjectRecords

    data = tmp_path / "data"
    (data / "git").mkdir(parents=True)
    (data / "keep.txt").write_text("the data folder's own file")
    records = ProjectRecords(data)
    service = SimpleNamespace(records=records, settings=Settings(data_dir=data, git_remotes="file://"))
    git = GitProjects(service)
    assert git.folder("shop") == (data / "git" / "shop").resolve()
    with pytest.raises(UnsafeGitFolder):
        git.folder(name)
    with pytest.raises(UnsafeGitFolder, match="begin with '.'"):
        asyncio.run(git.add(name, (tmp_path / "r.git").as_uri(), ["main"]))
    # A record left by an older server: dropping it refuses to remove what lies outside.
    records.put(name, {"git": {"url": "file:///x.git", "default": "main", "branches": {}}})
    with pytest.raises(UnsafeGitFolder):
        asyncio.run(git.drop_all(name))
    assert git.webhook_secret(name) is None
    assert (data / "keep.txt").exists() and not (data / "repo.git").exists()


def crafted_remote(root: Path) -> tuple[Path, str, str]:
    """A bare remote whose first commit holds the tree entry `sub/../../victim` (git's
    plumbing writes what `git add` never would) and whose second commit removes it."""
    bare = root / "crafted.git"
    git("init", "--bare", "--quiet", str(bare))

    def run(*args: str, stdin: str = "") -> str:
        import subprocess

        from tests.service.git_fixtures import ENV

        return subprocess.run(
            ["git", "--git-dir", str(bare), *args],
            input=stdin,
            text=True,
            capture_output=True,
            check=True,
            env={**ENV, "PATH": "/usr/bin:/bin"},
        ).stdout.strip()

    blob = run("hash-object", "-w", "--stdin", stdin="victim\n")
    victim = run("mktree", stdin=f"100644 blob {blob}\tvictim\n")
    up = run("mktree", stdin=f"040000 tree {victim}\t..\n")
    upup = run("mktree", stdin=f"040000 tree {up}\t..\n")
    first = run(
        "commit-tree",
        run("mktree", stdin=f"040000 tree {upup}\tsub\n100644 blob {blob}\tok.txt\n"),
        "-m",
        "crafted",
    )
    second = run(
        "commit-tree", run("mktree", stdin=f"100644 blob {blob}\tok.txt\n"), "-p", first, "-m", "removal"
    )
    run("update-ref", "refs/heads/main", second)
    return bare, first, second


def test_a_commit_is_written_out_as_it_streams_and_a_failed_archive_is_a_typed_error(tmp_path):
    """The files of a commit go from `git archive` to the folder a tar block at a time: a
    23 MB file costs far less memory than its size (measured with tracemalloc, which sees any
    buffer that holds the archive). A commit git cannot write out is git's own error, not the
    tar reader's at an empty stream, and leaves the folder as it was."""
    import tracemalloc

    from fathom.errors import FathomError
    from fathom.index.git_export import GitLimits, Plan
    from fathom.index.git_source import Credentials, GitRepo

    big = "".join(f"row {i:08d} of a large generated file\n" for i in range(600_000))
    remote = Remote(tmp_path)
    commit = remote.commit({"data/big.txt": big, "src/app.py": "def app():\n    return 1\n"})
    limits = GitLimits(max_file_bytes=30_000_000)
    repo = GitRepo(tmp_path / "clone.git", remote.file_url, Credentials(), limits=limits)
    assert repo.fetch(["main"]) == {"main": commit}
    tree = tmp_path / "tree"
    tracemalloc.start()
    try:
        written = repo.export(commit, tree).written
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert written == 2 and (tree / "data" / "big.txt").stat().st_size == len(big) > 23_000_000
    assert (tree / "src" / "app.py").read_text() == "def app():\n    return 1\n"
    assert peak < 4_000_000, f"{peak} bytes held while writing out a {len(big)}-byte file"
    with pytest.raises(FathomError) as failed:  # its plan already: git cannot list its files
        repo.export("0" * 40, tmp_path / "other")
    assert "git failed" in str(failed.value) and "add the project again" in str(failed.value)
    with pytest.raises(FathomError) as failed:  # the archive itself, when the plan was given
        repo.export("0" * 40, tmp_path / "other", plan=Plan("0" * 40, {}, limits))
    assert "git failed" in str(failed.value) and "add the project again" in str(failed.value)
    assert not any((tmp_path / "other").iterdir())
    assert repo.export(commit, tree, ["src/app.py"]).written == 1


def test_a_crafted_tree_cannot_remove_or_write_outside_the_folder(tmp_path):
    from fathom.errors import FathomError
    from fathom.index.git_source import (
        Change,
        Credentials,
        GitRepo,
        GitTreeUnsafe,
        apply_changes,
        check_tree_path,
        parse_changes,
    )

    bare, first, second = crafted_remote(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("must survive")
    # git itself refuses the objects on fetch.
    clone = GitRepo(tmp_path / "clone.git", bare.as_uri(), Credentials())
    with pytest.raises(FathomError):
        clone.fetch(["main"])
    # The diff parser refuses the path, naming the commit (read in the crafted repository).
    crafted = GitRepo(bare, bare.as_uri(), Credentials())
    with pytest.raises(GitTreeUnsafe, match=second[:40]):
        crafted.changes(first, second)
    for bad in ["sub/../../victim", "../victim", "/etc/passwd", "a//b", "./a", "a/.", ""]:
        with pytest.raises(GitTreeUnsafe):
            check_tree_path(bad, second)
    with pytest.raises(GitTreeUnsafe):
        parse_changes(b"D\0sub/../../victim\0", second)
    assert parse_changes(b"M\0a/b.py\0D\0c.py\0", second) == [Change("a/b.py", False), Change("c.py", True)]
    # Applying such a change (however it came) removes nothing outside the tree.
    tree = tmp_path / "trees" / "main"
    (tree / "sub").mkdir(parents=True)
    with pytest.raises(GitTreeUnsafe):
        apply_changes(crafted, second, tree, [Change("sub/../../victim", True)])
    (tree / "link").symlink_to(tmp_path)
    with pytest.raises(GitTreeUnsafe):
        apply_changes(crafted, second, tree, [Change("link/victim", True)])
    assert victim.read_text() == "must survive"
    # A removal prunes the folders it empties, and stops at the tree's own folder.
    (tree / "link").unlink()
    (tree / "sub").rmdir()
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "gone.py").write_text("x = 1\n")
    apply_changes(crafted, second, tree, [Change("a/b/gone.py", True)])
    assert tree.is_dir() and not (tree / "a").exists()


def test_a_search_ref_is_a_branch_a_tag_or_a_commit_id_and_nothing_else(tmp_path):
    from types import SimpleNamespace

    from fathom.errors import ConfigError
    from fathom.index.git_source import check_branch
    from fathom.service.git_projects import GitProjects, InvalidRef, UnknownRef
    from fathom.service.projects import ProjectRecords

    remote = Remote(tmp_path)
    commit = remote.commit({"app.py": "def run():\n    return 1\n"}, "first")
    git("tag", "v1", cwd=remote.work)
    git("push", "--quiet", "origin", "v1", cwd=remote.work)
    data = tmp_path / "data"
    records = ProjectRecords(data)
    service = SimpleNamespace(records=records, settings=Settings(data_dir=data, git_remotes=remote.file_url))
    projects = GitProjects(service)
    projects.repo("shop", remote.file_url).fetch(["main"])
    records.put("shop", {"git": {"url": remote.file_url, "default": "main", "branches": {"main": commit}}})
    assert projects.resolve("shop", None) == ("main", commit)
    assert projects.resolve("shop", "main") == ("main", commit)
    assert projects.resolve("shop", commit[:7]) == ("main", commit)
    assert projects.resolve("shop", commit) == ("main", commit)
    assert projects.resolve("shop", "v1") == ("main", commit)
    for bad in [":/first", "main~0", "main^0", "HEAD@{0}", "-main", "v1..main", "main:app.py"]:
        with pytest.raises(InvalidRef, match="commit id of 7-40 hex digits"):
            projects.resolve("shop", bad)
    with pytest.raises(UnknownRef):
        projects.resolve("shop", "no-such-tag")
    with pytest.raises(ConfigError):
        check_branch("-main")
    # A remote whose HEAD names an option-like branch is refused, not handed to git.
    (remote.bare / "refs" / "heads" / "-evil").write_text(commit + "\n")
    (remote.bare / "HEAD").write_text("ref: refs/heads/-evil\n")
    with pytest.raises(ConfigError, match="invalid branch name"):
        projects.repo("shop", remote.file_url).remote_default()


def test_the_credentials_repr_never_shows_the_token():
    from fathom.index.git_source import Credentials

    creds = Credentials(ssh_key_file=Path("/keys/id"), token="tok-canary-123", username="alice")
    shown = repr(creds) + str(creds) + f"{creds!r}"
    assert "tok-canary-123" not in shown and "alice" in shown


async def test_pushes_during_a_sync_make_one_more_sync_and_a_shutdown_stops_it():
    """The queue alone (the sync itself is stood in for): pushes that arrive while a sync runs
    are all fetched by one sync after it, never two at once; a failure is kept as the outcome;
    a shutdown cancels the sync under way and says so."""
    from fathom.errors import FathomError
    from fathom.service.git_syncs import Syncs

    calls: list[list[str]] = []
    release = asyncio.Event()
    busy = 0

    async def run(project, branches):
        nonlocal busy
        busy += 1
        assert busy == 1, "two syncs of one project at once"
        calls.append(list(branches))
        try:
            await release.wait()
            if "broken" in branches:
                raise FathomError("remote gone")
            return {"project": project, "branches": {b: {"commit": "c1"} for b in branches}}
        finally:
            busy -= 1

    syncs = Syncs(run)
    syncs.request("shop", ["main"])
    await wait_for(lambda: calls, what="the first sync")
    for branch in ("feature", "main", "feature"):
        syncs.request("shop", [branch])
    status = syncs.status("shop")
    assert status["running"] and status["queued"] == ["feature", "main"] and status["last"] is None
    release.set()
    done = await wait_for(
        lambda: (s := syncs.status("shop"))["last"] and not s["running"] and not s["queued"] and s,
        what="the coalesced sync",
    )
    assert calls == [["main"], ["feature", "main"]]
    assert done["last"]["result"]["branches"] == {"feature": {"commit": "c1"}, "main": {"commit": "c1"}}

    syncs.request("shop", ["broken"])
    failed = await wait_for(
        lambda: "error" in ((s := syncs.status("shop"))["last"] or {}) and s, what="the failed sync"
    )
    assert failed["last"]["error"] == "remote gone" and failed["last"]["branches"] == ["broken"]

    release.clear()
    syncs.request("shop", ["main"])
    await wait_for(lambda: syncs.status("shop")["running"], what="a sync under way")
    await syncs.aclose()
    assert syncs.status("shop")["last"]["error"] == "stopped by a shutdown"
    assert not syncs.status("shop")["running"]


@pytest.mark.slow
def test_the_git_commands_work_on_a_running_server_through_its_admin_api(tmp_path, monkeypatch):
    """`fathom projects add|track|sync|untrack --server URL`: the team server clones and
    indexes in its own data dir; the CLI's data dir stays empty; the admin token comes from
    the environment only."""
    from tests.fleet.fleet_fixtures import ThreadedServer
    from tests.server.admin_fixtures import build_operator_app

    remote = build_remote(tmp_path)
    monkeypatch.setenv("FATHOM_GIT_REMOTES", remote.file_url)
    running = ThreadedServer(build_operator_app(tmp_path / "data"))
    url = running.start()
    service = running.app.state.service
    mine = ["--data-dir", str(tmp_path / "cli")]

    def invoke(*args: str, token: str = ADMIN, code: int = 0) -> str:
        result = CliRunner().invoke(
            app,
            [*mine, "projects", *args, "--server", url],
            env={"FATHOM_ADMIN_TOKEN": token, "COLUMNS": "200"},
        )
        assert result.exit_code == code, result.output
        return " ".join(result.output.split())

    try:
        refused = invoke("add", "shop", "--git", remote.file_url, token="", code=2)
        assert "set FATHOM_ADMIN_TOKEN in the environment" in refused
        assert service.records.get("shop") is None
        added = invoke("add", "shop", "--git", remote.file_url, "--branch", "main")
        assert "webhook secret" in added and "default branch: main" in added
        assert list(service.records.get("shop")["git"]["branches"]) == ["main"]
        invoke("track", "shop", "feature")
        assert service.store.has_project("shop@feature")
        pushed = remote.commit(LOYALTY, "loyalty")
        synced = invoke("sync", "shop")
        assert "shop: synced" in synced and pushed[:12] in synced
        assert service.records.get("shop")["git"]["branches"]["main"] == pushed
        invoke("untrack", "shop", "feature")
        assert not service.store.has_project("shop@feature")
        unknown = invoke("sync", "nothing", code=2)
        assert "does not come from git" in unknown
    finally:
        running.stop()
    assert not (tmp_path / "cli" / "git").exists()  # nothing was done in this process
