"""`/admin/projects` and `/admin/search`: what is indexed, each project's status and live sync
(watch) state, turning its sync on or off, dropping a project with everything of it, and the
dashboard's search box (the same search as the MCP tools).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from fastapi import APIRouter

from fathom.errors import ConfigError
from fathom.server.admin.bodies import SearchBody, WatchChange
from fathom.server.admin.operator import require_project
from fathom.server.answers import refusal
from fathom.server.search_answer import answer_of

if TYPE_CHECKING:
    from fathom.server.admin.operator import OperatorParts
    from fathom.service.ports import ProjectsService
    from fathom.service.projects import ProjectSummary

log = logging.getLogger("fathom.server.admin")


def projects_router(parts: OperatorParts) -> APIRouter:
    """List, read, search, drop and sync projects."""
    router = APIRouter()

    @router.get("/projects", tags=["projects"])
    async def list_projects() -> dict[str, Any]:
        """Every indexed project: rows per table, last indexed, its root folder and its live
        sync (watch) state; a project from git also its remote, branches and last sync, and a
        branch's overlay which project and branch it is."""
        service = parts.need("service")

        def load() -> list[dict[str, Any]]:
            return [project_view(service, p) | git_facts(service, p.name) for p in service.projects()]

        return {"projects": await asyncio.to_thread(load)}

    @router.post("/search", tags=["projects"])
    async def search(body: SearchBody) -> dict[str, Any]:
        """Search as an MCP client would (`search_code`, or `search_docs` with table docs): the
        hits with why they ranked (vector and keyword ranks, cosine, match, rerank score)."""
        service = parts.need("service")
        if body.project is not None:
            await require_project(service, body.project)
        try:
            request = body.request()
            found = answer_of(await service.searches.ranking(request, reranker=parts.router), request)
        except ConfigError as exc:
            raise refusal(400, str(exc)) from None
        return found.model_dump(mode="json")

    @router.get("/projects/{project}", tags=["projects"])
    async def project_status(project: str) -> dict[str, Any]:
        """One project's index status: tables, provenance, last run, jobs, watch state."""
        service = parts.need("service")
        await require_project(service, project)
        return asdict(await asyncio.to_thread(service.index_status, project))

    @router.delete("/projects/{project}", tags=["projects"])
    async def drop_project(project: str) -> dict[str, Any]:
        """Remove a project and everything of it (both tables, its record, its jobs, its live
        sync); its folder is not touched. A running job of it is cancelled first."""
        service = parts.need("service")
        await require_project(service, project)
        result: dict[str, Any] = await service.drop(project)
        log.info("project %s dropped by the operator", project)
        return result

    @router.put("/projects/{project}/watch", tags=["projects"])
    async def set_watch(project: str, body: WatchChange) -> dict[str, Any]:
        """Turn the project's live sync on or off (remembered across restarts)."""
        service = parts.need("service")
        await require_project(service, project)
        return {"project": project, "watch": await service.set_watch(project, body.enabled)}

    return router


def git_facts(service: ProjectsService, name: str) -> dict[str, Any]:
    """What the projects view adds for a project from git (`git`: its remote, default branch,
    each tracked branch's commit, its poll, its webhook's path and its syncs; never the
    webhook's secret) and for a branch's overlay (`branch_of`: the project and branch)."""
    git = getattr(service, "git", None)
    record = service.records.get(name) or {}
    facts: dict[str, Any] = {}
    if git is not None and record.get("git"):
        kept = record["git"]
        status = git.syncs.status(name)
        last = status["last"]
        facts["git"] = {
            "url": kept["url"],
            "default": kept["default"],
            "branches": dict(kept["branches"]),
            "poll_s": kept.get("poll_s"),
            "webhook": f"/hooks/git/{quote(name, safe='')}",
            "sync": {
                "running": status["running"],
                "queued": status["queued"],
                "last": None
                if last is None
                else {k: last.get(k) for k in ("trigger", "started_at", "finished_at", "error")}
                | {"branches": _synced(last.get("result"))},
            },
        }
    overlay = record.get("overlay")
    if overlay:
        facts["branch_of"] = {
            "project": overlay["of"],
            "branch": overlay["branch"],
            "commit": overlay["commit"],
        }
    return facts


def _synced(result: dict[str, Any] | None) -> dict[str, str]:
    """A sync's outcome per branch, in words: its commit, unchanged or deleted on the remote."""
    out = {}
    for branch, done in ((result or {}).get("branches") or {}).items():
        if "commit" not in done:  # {"deleted": True}; an index report's "deleted" counts rows
            out[branch] = "deleted on the remote: untracked"
        elif done.get("unchanged"):
            out[branch] = f"unchanged at {done['commit'][:12]}"
        else:
            carried = f", {done['carried']} carried from other branches" if done.get("carried") else ""
            out[branch] = (
                f"indexed {done['commit'][:12]} ({done.get('embedded', 0)} chunks embedded{carried})"
            )
    return out


ENDED_JOB_STATES = frozenset({"done", "failed", "cancelled"})


def project_view(service: ProjectsService, summary: ProjectSummary) -> dict[str, Any]:
    """One project as the projects view shows it (blocking: reads the store): rows, model and
    width per table, the last run with its outcome and skips, the provenance, the live sync."""
    view: dict[str, Any] = {
        "name": summary.name,
        "root": summary.root,
        "tables": summary.tables,
        "last_indexed": summary.last_indexed,
        "indexing": False,
        "unfinished_full_run": summary.indexing,
        "damaged": summary.damaged,
        "details": {},
        "last_run": None,
        "watch": {},
    }
    if summary.damaged:
        return view
    status = service.index_status(summary.name)
    view["details"] = status.tables
    view["watch"] = status.watch
    # "indexing" means a job of it runs now; a shadow table a cancelled full run left is not that.
    view["indexing"] = any(j["state"] not in ENDED_JOB_STATES for j in status.jobs)
    run = status.last_run
    if run:  # the last completed run (kept with the project)
        view["last_run"] = {
            k: run.get(k)
            for k in (
                "full",
                "files",
                "chunks",
                "embedded",
                "deleted",
                "skipped",
                "skipped_dirs",
                "elapsed_s",
                "notes",
                "finished_at",
            )
        }
        view["last_run"]["outcome"] = "done"
    if status.jobs and status.jobs[-1]["state"] != "done":  # a later job that did not complete
        last = status.jobs[-1]
        view["last_run"] = (view["last_run"] or {}) | {
            "outcome": last["state"] + (f": {last['error']}" if last["error"] else ""),
            "job": last["id"],
        }
    return view
