"""Projects from git remotes, branch by branch.

What this module owns:

* Adding a project from a remote (`fathom projects add NAME --git URL --branch B…`): the URL,
  the allow-list and every branch are checked against the remote before anything is written;
  then a bare clone under `DATA_DIR/git/NAME/repo.git` is fetched (within
  FATHOM_GIT_MAX_FETCH_BYTES), every branch's files are measured against
  FATHOM_GIT_MAX_TREE_BYTES, and only then is the project recorded and each branch indexed; a
  refusal on the way leaves no clone behind. A file over FATHOM_GIT_MAX_FILE_BYTES is never
  written: a branch's report counts it among its `too-large` files and names it.
* Branches that share vectors and storage by content. The default branch is the project
  itself (`NAME`), indexed from its files written out under `DATA_DIR/git/NAME/trees/`. Every
  other tracked branch is an overlay project `NAME@BRANCH` that holds only the files in which
  it differs from the default branch, and lists the paths it shadows (changed or removed);
  its index borrows vectors by content from the default branch (and the default branch from
  the overlays), so a second branch embeds only chunk texts no branch embedded before, and
  costs only the files that differ. A search at a branch reads its overlay plus the default
  branch less the shadowed paths; every hit says the commit it comes from.
* Staying fresh: `sync` fetches and brings each branch's files from its old commit to its new
  one by the diff between them (changed files written, removed ones deleted), then runs an
  incremental index of only those files (only chunks whose text changed are embedded). A webhook
  (`POST /hooks/git/{project}`, HMAC-SHA256 with the project's secret) and a poll interval
  per project call it.
* Untracking a branch drops its overlay, files and refs; dropping the project drops them all.

What it refuses to do: run git itself (`fathom.index.git_source` does), hold credentials
anywhere but the settings, or show the webhook secret after the add that made it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from fathom import scope
from fathom.config import atomic_write_text
from fathom.errors import ConfigError, FathomError
from fathom.index import search as search_mod
from fathom.index.git_export import Exported, GitLimits
from fathom.index.git_source import (
    Credentials,
    GitRepo,
    apply_changes,
    check_branch,
    check_remote,
    diff_paths,
    scrub,
)
from fathom.index.request import MAX_K, SearchRequest
from fathom.index.results import Ranking
from fathom.index.store import UnknownProject
from fathom.index.store.rules import check_project_name
from fathom.index.walking.reasons import TOO_LARGE
from fathom.service.git_syncs import Syncs, WebhookRefused, pushed_branch, signature_ok
from fathom.space import Space

if TYPE_CHECKING:
    from fathom.config import Settings
    from fathom.index.job import IndexReport
    from fathom.index.store import Store
    from fathom.inference.provider import Provider
    from fathom.service.projects import ProjectRecords

log = logging.getLogger("fathom.service.git")

MAX_BRANCHES = 50
_COMMIT_ID = re.compile(r"^[0-9a-f]{7,40}$")
MIN_POLL_S = 10.0
MAX_NAMED = 100  # files too large to write out named in a report (all of them are counted)


class NotAGitProject(ConfigError):
    """A git operation (or a `ref`) on a project that does not come from git."""


class UnknownRef(ConfigError):
    """A `ref` that names nothing this project indexed."""


class InvalidRef(ConfigError):
    """A search `ref` that is neither a branch name, a tag name nor a commit id."""


class BranchDropRefused(ConfigError):
    """A drop of a tracked branch's index on its own: the branch is untracked, or its project
    dropped with all of its branches."""

    def __init__(self, name: str, of: str, branch: str):
        super().__init__(
            f"{name} is branch {branch} of the git project {of}: untrack it "
            f"(`fathom projects untrack {of} {branch}`), or drop {of} with all of "
            f"its branches"
        )


class UnsafeGitFolder(ConfigError):
    """A project name whose folder would lie outside `DATA_DIR/git` (`.`, `..`, …)."""


def _is_branch_name(ref: str) -> bool:
    try:
        check_branch(ref)
    except ConfigError:
        return False
    return True


def overlay_name(project: str, branch: str) -> str:
    return f"{project}@{branch}"


def check_poll(poll_s: Any) -> float | None:
    if poll_s is None:
        return None
    if (
        isinstance(poll_s, bool)
        or not isinstance(poll_s, (int, float))
        or not MIN_POLL_S <= poll_s <= 7 * 86400
    ):
        raise ConfigError(
            f"poll interval must be {MIN_POLL_S:.0f}-604800 seconds (or none: "
            f"only webhooks and `fathom projects sync` refresh it)"
        )
    return float(poll_s)


class GitHome(Protocol):
    """What the git side needs of the service (`fathom.service.Fathom`, which imports this
    module): the records, the store as the caller sees it, index and drop runs, and each
    table's query encoder."""

    @property
    def settings(self) -> Settings: ...

    @property
    def records(self) -> ProjectRecords: ...

    @property
    def store(self) -> Store: ...

    def encoder_in(self, space: Space, project: str) -> Provider: ...

    async def index(
        self,
        path: str | Path,
        project: str | None = None,
        *,
        reason: str | None = None,
        paths: Sequence[str] | None = None,
    ) -> IndexReport: ...

    async def drop(self, project: str, *, untracking: bool = False) -> dict[str, Any]: ...


class GitProjects:
    """The git side of a `Fathom` (`GitHome`): its projects' clones, branches, syncs and
    webhooks."""

    def __init__(self, fathom: GitHome, *, clock: Callable[[], float] = time.monotonic):
        self.fathom = fathom
        self.clock = clock
        self._locks: dict[str, asyncio.Lock] = {}
        self.syncs = Syncs(self.sync)  # after a webhook's answer; the last outcome of each

    # ---- where things live

    @property
    def settings(self) -> Settings:
        return self.fathom.settings

    def folder(self, project: str) -> Path:
        """`DATA_DIR/git/NAME`, checked to lie inside `DATA_DIR/git` before anything is written
        or removed there (a name such as `..` would otherwise reach the data folder itself)."""
        base = (self.settings.data_dir / "git").resolve()
        folder = base / quote(project, safe="")
        if project.startswith(".") or folder.resolve().parent != base:
            raise UnsafeGitFolder(
                f"project name {project[:80]!r} cannot hold a git project: a "
                f"git project's name may not begin with '.'; choose another name"
            )
        return folder

    def tree(self, project: str, branch: str) -> Path:
        return self.folder(project) / "trees" / quote(branch, safe="")

    def repo(self, project: str, url: str) -> GitRepo:
        s = self.settings
        token = s.git_token.get_secret_value() if s.git_token is not None else None
        return GitRepo(
            self.folder(project) / "repo.git",
            url,
            Credentials(ssh_key_file=s.git_ssh_key_file, token=token, username=s.git_username),
            timeout_s=s.git_timeout_s,
            allowed=s.git_remote_list(),
            limits=GitLimits(s.git_max_file_bytes, s.git_max_tree_bytes, s.git_max_fetch_bytes),
        )

    def record(self, project: str) -> dict[str, Any]:
        git = (self.fathom.records.get(project) or {}).get("git")
        if not git:
            raise NotAGitProject(
                f"project {project!r} does not come from git: add it with "
                f"`fathom projects add {project} --git URL`"
            )
        return dict(git)

    def tracks(self, project: str | None) -> bool:
        """Whether `project` comes from git (its searches then carry their commit)."""
        return project is not None and bool((self.fathom.records.get(project) or {}).get("git"))

    def refuse_watch(self, project: str) -> None:
        """Refuse live sync for a project from git or a branch of one (blocking: reads a record):
        it follows its remote through the webhook, its poll and `fathom projects sync`."""
        kept = self.fathom.records.get(project) or {}
        if kept.get("git") or kept.get("overlay"):
            raise ConfigError(
                f"project {project!r} comes from git: it follows its remote through "
                f"the push webhook, its poll and `fathom projects sync`, not by "
                f"watching a folder; its live sync stays off"
            )

    def refuse_branch_drop(self, name: str) -> None:
        """Refuse to drop `name` on its own when it is the index of a branch its git project
        tracks (the next sync would bring it back); one left behind by a failed track is not
        tracked, and may be dropped. Blocking: reads the records."""
        overlay = (self.fathom.records.get(name) or {}).get("overlay")
        if not overlay:
            return
        of, branch = overlay["of"], overlay["branch"]
        git = (self.fathom.records.get(of) or {}).get("git") or {}
        if branch in (git.get("branches") or {}):
            raise BranchDropRefused(name, of, branch)

    def branches_within(self, projects: Iterable[str]) -> frozenset[str]:
        """The branch indexes (`NAME@BRANCH`) of the git projects among `projects`: whoever may
        see a project from git may see its branches (blocking: reads the records). A folder
        project whose name only looks like one is not among them."""
        held = set(projects)
        return frozenset(
            name
            for name, kept in self.fathom.records.load().items()
            if (kept.get("overlay") or {}).get("of") in held
        )

    def refuse_taken_names(self, project: str, branches: Iterable[str]) -> None:
        """Refuse to index a branch under a name (`NAME@BRANCH`) another project holds: a
        folder project so named would be overwritten, and whoever may see it would see the
        branch. A branch index a failed track left behind is this project's, and is reused.
        Every project counts, whoever asks (blocking: reads the records and the store)."""
        records = self.fathom.records.load()
        with scope.within(None):
            for branch in branches:
                name = overlay_name(project, branch)
                kept = records.get(name)
                if kept is not None and (kept.get("overlay") or {}).get("of") == project:
                    continue
                if kept is not None or self.fathom.store.has_project(name):
                    raise ConfigError(
                        f"the name {name!r} is taken by a project that is not a "
                        f"branch of {project}, and branch {branch!r} would be "
                        f"indexed under it: drop or re-index that project under "
                        f"another name first"
                    )

    def lock(self, project: str) -> asyncio.Lock:
        return self._locks.setdefault(project, asyncio.Lock())

    # ---- adding, tracking, untracking

    async def add(
        self, project: str, url: str, branches: Sequence[str] = (), *, poll_s: float | None = None
    ) -> dict[str, Any]:
        """Clone `url` and index `branches` (the first is the default; none: the remote's
        default branch). Everything is checked before anything is written. The answer holds
        the webhook secret, shown this once."""
        check_project_name(project)
        if "@" in project or "/" in project or project.startswith("."):
            raise UnsafeGitFolder(
                f"a git project's name may not contain '@' or '/' nor begin "
                f"with '.' ({project[:80]!r}): branches are named "
                f"PROJECT@BRANCH, and the name is a folder of the data folder"
            )
        self.folder(project)
        url = check_remote(url, self.settings.git_remote_list())
        branches = list(dict.fromkeys(check_branch(b) for b in branches))
        if len(branches) > MAX_BRANCHES:
            raise ConfigError(f"at most {MAX_BRANCHES} branches per project")
        poll = check_poll(poll_s)
        existing = await asyncio.to_thread(self.fathom.records.get, project)
        if existing is not None or await asyncio.to_thread(self.fathom.store.has_project, project):
            raise ConfigError(
                f"project {project!r} exists already: drop it first (`fathom drop "
                f"{project}`) or choose another name"
            )
        repo = self.repo(project, url)
        if not branches:
            default = await asyncio.to_thread(repo.remote_default)
            branches = [default] if default else []
            if not branches:
                raise ConfigError(f"the remote {scrub(url)} names no default branch: pass --branch")
        await asyncio.to_thread(repo.check_branches, branches)
        await asyncio.to_thread(self.refuse_taken_names, project, branches[1:])
        secret = secrets.token_urlsafe(32)
        async with self.lock(project):
            commits = await self._fetch_new(project, repo, branches)
            atomic_write_text(self.folder(project) / "webhook.secret", secret)
            git: dict[str, Any] = {"url": url, "default": branches[0], "branches": {}, "poll_s": poll}
            await asyncio.to_thread(
                self.fathom.records.put, project, {"git": git, "watch": False, "lenders": []}
            )
            reports = {}
            for branch in branches:
                reports[branch] = await self._index_branch(project, repo, branch, commits[branch])
        log.info("git project %s added from %s (%s)", project, scrub(url), ", ".join(branches))
        return {
            "project": project,
            "url": scrub(url),
            "default": branches[0],
            "branches": {b: r["commit"] for b, r in reports.items()},
            "reports": reports,
            "webhook": f"/hooks/git/{quote(project, safe='')}",
            "webhook_secret": secret,
            "poll_s": poll,
        }

    async def _fetch_new(self, project: str, repo: GitRepo, branches: Sequence[str]) -> dict[str, str]:
        """The first fetch of a project being added, and every branch's files measured against
        their bound, before the project is recorded: a refusal (a fetch or a tree too large, an
        unreachable remote) leaves no clone behind."""
        try:
            commits = await asyncio.to_thread(repo.fetch, branches)
            for commit in commits.values():
                plan = await asyncio.to_thread(repo.plan, commit)
                plan.check(scrub(repo.url))
        except BaseException:
            await asyncio.to_thread(shutil.rmtree, self.folder(project), True)
            raise
        return commits

    async def track(self, project: str, branch: str) -> dict[str, Any]:
        """Index one more branch of a git project (an overlay of the default branch)."""
        check_branch(branch)
        git = await asyncio.to_thread(self.record, project)
        if branch in git["branches"]:
            raise ConfigError(
                f"branch {branch} of {project} is tracked already: `fathom projects "
                f"sync {project}` refreshes it"
            )
        repo = self.repo(project, git["url"])
        await asyncio.to_thread(repo.check_branches, [branch])
        await asyncio.to_thread(self.refuse_taken_names, project, [branch])
        async with self.lock(project):
            commit = (await asyncio.to_thread(repo.fetch, [branch]))[branch]
            report = await self._index_branch(project, repo, branch, commit)
        return {"project": project, "branch": branch, **report}

    async def untrack(self, project: str, branch: str) -> dict[str, Any]:
        """Stop tracking a branch: its overlay index, files and refs are dropped (vectors it
        shared by content stay with the branches that hold them)."""
        git = await asyncio.to_thread(self.record, project)
        if branch not in git["branches"]:
            raise ConfigError(
                f"branch {branch!r} of {project} is not tracked (tracked: {', '.join(git['branches'])})"
            )
        if branch == git["default"]:
            raise ConfigError(
                f"{branch} is the default branch of {project}: drop the project "
                f"instead (`fathom drop {project}`)"
            )
        async with self.lock(project):
            await self._drop_overlay(project, branch)
            git["branches"].pop(branch)
            await self._save(project, git)
            await asyncio.to_thread(self.repo(project, git["url"]).forget, branch)
        return {"project": project, "branch": branch, "untracked": True}

    async def drop_all(self, project: str) -> None:
        """Everything git-side of a project being dropped: its overlays and its folder. Syncs
        pushed but not begun are forgotten; one under way is waited for (its lock)."""
        self.syncs.forget(project)
        async with self.lock(project):
            record = await asyncio.to_thread(self.fathom.records.get, project) or {}
            for branch in (record.get("git") or {}).get("branches", {}):
                if branch != record["git"]["default"]:
                    await self._drop_overlay(project, branch)
            # and the branches a failed track left indexed but never tracked
            for kept in (await asyncio.to_thread(self.fathom.records.load)).values():
                if (kept.get("overlay") or {}).get("of") == project:
                    await self._drop_overlay(project, kept["overlay"]["branch"])
            await asyncio.to_thread(shutil.rmtree, self.folder(project), True)
        self.syncs.forget(project)  # and what a sync that ran meanwhile left

    async def _drop_overlay(self, project: str, branch: str) -> None:
        name = overlay_name(project, branch)
        known = await asyncio.to_thread(self.fathom.store.has_project, name)
        recorded = await asyncio.to_thread(self.fathom.records.get, name)
        if known or recorded is not None:
            await self.fathom.drop(name, untracking=True)
        await asyncio.to_thread(shutil.rmtree, self.tree(project, branch), True)

    async def _save(self, project: str, git: dict[str, Any]) -> None:
        default = git["default"]
        lenders = [overlay_name(project, b) for b in git["branches"] if b != default]
        await asyncio.to_thread(self.fathom.records.update, project, git=git, lenders=lenders)

    # ---- indexing a branch

    async def _index_branch(self, project: str, repo: GitRepo, branch: str, commit: str) -> dict[str, Any]:
        """Bring the branch's files to `commit` (by diff when it was indexed before) and index
        them; the default branch's overlays follow it."""
        git = await asyncio.to_thread(self.record, project)
        default = git["default"]
        if branch == default:
            report = await self._index_default(project, repo, commit, git["branches"].get(branch))
            git["branches"][branch] = commit
            await self._save(project, git)
            for other, at in list(git["branches"].items()):
                if other != default:
                    await self._index_overlay(project, repo, other, at, commit)
            return report
        report = await self._index_overlay(project, repo, branch, commit, git["branches"][default])
        git["branches"][branch] = commit
        await self._save(project, git)
        return report

    async def _index_default(
        self, project: str, repo: GitRepo, commit: str, before: str | None
    ) -> dict[str, Any]:
        tree = self.tree(project, (await asyncio.to_thread(self.record, project))["default"])
        if before is None or not tree.is_dir():
            plan = await asyncio.to_thread(repo.plan, commit)
            plan.check(scrub(repo.url))  # before the old tree is removed: it keeps serving
            await asyncio.to_thread(shutil.rmtree, tree, True)
            exported = await asyncio.to_thread(lambda: repo.export(commit, tree, plan=plan))
            written, changed, paths = exported.written, None, None
        else:
            changes = await asyncio.to_thread(repo.changes, before, commit)
            exported = await asyncio.to_thread(apply_changes, repo, commit, tree, changes)
            written, changed = sum(not c.gone for c in changes), len(changes)
            paths = diff_paths(changes)  # only the files the diff names are read
        report = await self.fathom.index(tree, project, reason="git", paths=paths)
        return _summary(report, commit, exported, files_written=written, files_changed=changed)

    async def _index_overlay(
        self, project: str, repo: GitRepo, branch: str, commit: str, base: str
    ) -> dict[str, Any]:
        """The overlay of `branch` at `commit` over the default branch at `base`: only the
        files that differ, and the paths whose default-branch rows it hides."""
        name = overlay_name(project, branch)
        tree = self.tree(project, branch)
        changes = await asyncio.to_thread(repo.changes, base, commit)
        plan = await asyncio.to_thread(repo.plan, commit)
        plan.check(scrub(repo.url))  # before the old overlay is removed
        await asyncio.to_thread(shutil.rmtree, tree, True)
        exported = await asyncio.to_thread(
            lambda: repo.export(commit, tree, [c.path for c in changes if not c.gone], plan=plan)
        )
        await asyncio.to_thread(
            self.fathom.records.update,
            name,
            watch=False,
            lenders=[project],
            overlay={
                "of": project,
                "branch": branch,
                "commit": commit,
                "base": base,
                "shadows": sorted(c.path for c in changes),
            },
        )
        report = await self.fathom.index(tree, name, reason="git")
        return _summary(report, commit, exported, files_changed=len(changes))

    # ---- staying fresh

    async def sync(self, project: str, branches: Sequence[str] | None = None) -> dict[str, Any]:
        """Fetch, and re-index every tracked branch (or those named) whose commit moved."""
        await asyncio.to_thread(self.record, project)  # not from git: refused before waiting
        done: dict[str, Any] = {}
        async with self.lock(project):
            if not await asyncio.to_thread((self.folder(project) / "repo.git").is_dir):
                raise NotAGitProject(
                    f"project {project!r} has no clone (it was dropped while "
                    f"this sync waited, or DATA_DIR/git/{project} was removed): "
                    f"add it again with `fathom projects add {project} --git URL`"
                )
            # Read under the lock: an untrack or drop this sync waited behind has changed it.
            git = await asyncio.to_thread(self.record, project)
            wanted = [
                b for b in (branches if branches is not None else git["branches"]) if b in git["branches"]
            ]
            repo = self.repo(project, git["url"])
            if not wanted:
                return {"project": project, "branches": done}
            # A branch deleted on the remote is dropped here (its index, files and ref); the
            # default branch is the project itself: its deletion is refused, and it keeps serving.
            heads = await asyncio.to_thread(repo.remote_heads)
            if git["default"] not in heads:
                await asyncio.to_thread(repo.check_branches, [git["default"]])
            for branch in [b for b in wanted if b not in heads]:
                await self._drop_overlay(project, branch)
                git = await asyncio.to_thread(self.record, project)
                git["branches"].pop(branch, None)
                await self._save(project, git)
                await asyncio.to_thread(repo.forget, branch)
                done[branch] = {"deleted": True}
            wanted = [b for b in wanted if b in heads]
            commits = await asyncio.to_thread(repo.fetch, wanted)
            # The default branch first: the overlays are re-based on its new commit.
            for branch in sorted(wanted, key=lambda b: b != git["default"]):
                current = (await asyncio.to_thread(self.record, project))["branches"].get(branch)
                if current == commits[branch]:
                    done[branch] = {"commit": current, "unchanged": True}
                    continue
                done[branch] = await self._index_branch(project, repo, branch, commits[branch])
            await self._rebase_stragglers(project, repo, done)
        return {"project": project, "branches": done}

    async def _rebase_stragglers(self, project: str, repo: GitRepo, done: dict[str, Any]) -> None:
        """Overlays still based on an older commit of the default branch (an earlier sync
        moved it, then failed or was stopped before re-basing them) are re-based now: an
        overlay on a stale base would show the default branch's newer files as the branch's."""
        git = await asyncio.to_thread(self.record, project)
        default_at = git["branches"][git["default"]]
        for branch, at in git["branches"].items():
            if branch == git["default"]:
                continue
            overlay = (
                await asyncio.to_thread(self.fathom.records.get, overlay_name(project, branch)) or {}
            ).get("overlay") or {}
            if overlay.get("base") != default_at:
                done[branch] = await self._index_overlay(project, repo, branch, at, default_at)

    async def aclose(self) -> None:
        await self.syncs.aclose()

    def webhook_secret(self, project: str) -> str | None:
        try:
            return (self.folder(project) / "webhook.secret").read_text().strip() or None
        except (OSError, UnsafeGitFolder):
            return None

    async def webhook(self, project: str, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        """A push event: verified against the project's secret before anything is read from
        it; a push to a tracked branch is synced after the answer (`Syncs`)."""
        secret = await asyncio.to_thread(self.webhook_secret, project)
        if secret is None or not signature_ok(secret, headers, body):
            raise WebhookRefused(
                "webhook refused: no valid signature for this project; set the "
                "secret `fathom projects add` showed in the forge's webhook "
                "settings (content type application/json)"
            )
        branch = pushed_branch(body)
        git = await asyncio.to_thread(self.record, project)
        if branch is None or branch not in git["branches"]:
            return {
                "project": project,
                "branch": branch,
                "queued": False,
                "reason": "not a push to a tracked branch",
            }
        self.syncs.request(project, [branch])
        return {
            "project": project,
            "branch": branch,
            "queued": True,
            "status": f"/admin/projects/{quote(project, safe='')}/sync",
        }

    def due(self, last: Mapping[str, float]) -> list[str]:
        """The git projects whose poll interval has passed since `last` synced them."""
        now = self.clock()
        out = []
        for name, record in self.fathom.records.load().items():
            poll = (record.get("git") or {}).get("poll_s")
            if poll and now - last.get(name, float("-inf")) >= poll:
                out.append(name)
        return out

    async def poll_once(self, last: dict[str, float]) -> list[str]:
        """Sync every project that is due; a failure is logged and retried at its next turn."""
        synced = []
        for name in await asyncio.to_thread(self.due, last):
            last[name] = self.clock()
            try:
                await self.syncs.run(name, None, "poll")
            except Exception:  # logged and kept by `run`; the loop outlives any one failure
                continue
            synced.append(name)
        return synced

    async def poll_forever(self, sleep: Callable[[float], Any] = asyncio.sleep, step_s: float = 5.0) -> None:
        last: dict[str, float] = {}
        while True:
            await self.poll_once(last)
            await sleep(step_s)

    # ---- searching at a ref

    def resolve(self, project: str, ref: str | None) -> tuple[str, str]:
        """(branch, commit) a search at `ref` reads: a tracked branch, or a tag or commit id
        that is a tracked branch's indexed commit. Nothing else reaches `git rev-parse` (no
        `:/regex`, `main~9`, `HEAD@{…}`): a commit id is 7-40 hex digits, a tag is looked up
        under `refs/tags/` only."""
        git = self.record(project)
        branches: dict[str, str] = git["branches"]
        if ref is None or ref in branches:
            branch = ref or git["default"]
            return branch, branches[branch]
        if not isinstance(ref, str) or not (_COMMIT_ID.match(ref) or _is_branch_name(ref)):
            raise InvalidRef(
                f"ref {scrub(str(ref))[:80]!r} is not accepted: give a tracked "
                f"branch ({', '.join(branches)}), a tag name (letters, digits and "
                f"`._/+-`, no `..`, not beginning with `-`) or a commit id of 7-40 "
                f"hex digits"
            )
        repo = self.repo(project, git["url"])
        names = [ref] * bool(_COMMIT_ID.match(ref)) + [f"refs/tags/{ref}"] * _is_branch_name(ref)
        for name in names:
            try:
                commit = repo.resolve(name)
            except FathomError:
                continue
            for branch, at in branches.items():
                if at == commit:
                    return branch, at
        raise UnknownRef(
            f"ref {ref[:80]!r} of {project} is not indexed: search a tracked "
            f"branch ({', '.join(branches)}), a tag or commit one of them is at, or "
            f"track the branch with `fathom projects track {project} BRANCH`"
        )

    async def ranking(self, request: SearchRequest, *, reranker: Any = None, rerank: bool = True) -> Ranking:
        """The search pipeline at the request's ref (its project's default branch without
        one): a branch's overlay and the default branch (less the paths the overlay shadows)
        are searched as one, on one fused scale; every hit carries its commit. Hits of an
        overlay name the overlay project (`read_code` reads them there)."""
        project = request.project
        if project is None:
            raise ConfigError("a search at a branch, tag or commit names its project")
        if not await asyncio.to_thread(self.fathom.store.has_project, project):
            known = await asyncio.to_thread(self.fathom.store.list_projects)
            raise UnknownProject(project, [p.name for p in known])
        branch, commit = await asyncio.to_thread(self.resolve, project, request.ref)
        git = await asyncio.to_thread(self.record, project)
        names, shadows = [project], set()
        held = scope.current()
        if branch != git["default"]:
            name = overlay_name(project, branch)
            overlay = (await asyncio.to_thread(self.fathom.records.get, name) or {}).get("overlay")
            shadows = set((overlay or {}).get("shadows") or ())
            with scope.within(None if held is None else held | {name}):
                if await asyncio.to_thread(self.fathom.store.has_project, name):
                    names.append(name)
        view = BranchView(self.fathom, names)
        # Every project of the view at once, with room for the hits the shadows take out.
        wide = replace(request, project=None, ref=None, k=min(MAX_K, request.k + len(shadows)))
        with scope.within(None if held is None else held | set(names)):
            if rerank:
                found = await search_mod.pipeline(view, wide, reranker=reranker)
            else:
                hits = await search_mod.retrieve(view, wide)
                found = Ranking(list(hits), reranked=False, notes=tuple(hits.notes))
        kept = [
            replace(h, commit=commit) for h in found.hits if not (h.project == project and h.path in shadows)
        ][: request.k]
        return replace(found, hits=kept)


class BranchView:
    """A search's view of one branch: the default branch's project and the branch's overlay,
    as the projects a search over "every project" reads (`search.Searchable`)."""

    def __init__(self, fathom: GitHome, names: list[str]):
        self.fathom, self.names = fathom, names

    @property
    def store(self) -> Any:
        return self.fathom.store

    def searchable(self, project: str | None, table: str) -> tuple[list[str], list[str]]:
        return list(self.names), []

    def encoder_in(self, space: Space, project: str) -> Any:
        return self.fathom.encoder_in(space, project)


def _summary(report: Any, commit: str, exported: Exported, **extra: Any) -> dict[str, Any]:
    """A branch's index report; the files too large to write out are counted with the
    walker's own `too-large` skips, and named (`too_large`)."""
    skipped = dict(report.skipped)
    if exported.too_large:
        skipped[TOO_LARGE] = skipped.get(TOO_LARGE, 0) + len(exported.too_large)
    return {
        "commit": commit,
        "files": report.files,
        "chunks": report.chunks,
        "embedded": report.embedded,
        "reused": report.reused,
        "carried": report.carried,
        "deleted": report.deleted,
        "skipped": skipped,
        "too_large": exported.too_large[:MAX_NAMED],
        **extra,
    }
