"""HTTP routes of projects from git: the forges' push webhook and the operator's git admin API.

* `POST /hooks/git/{project}`: a push event from GitHub, Gitea or GitLab. The guard lets it
  through without a bearer token; this route answers 401 unless the body carries a valid
  signature for the project's own secret (HMAC-SHA256 in `X-Hub-Signature-256` or
  `X-Gitea-Signature`, or GitLab's `X-Gitlab-Token`), checked before the body is parsed, so an
  unsigned call changes nothing. An unknown project is refused the same way (no oracle). A
  signed push to a tracked branch fetches and re-indexes what the push changed, then answers.
* `/admin/projects/git` (add), `/admin/projects/{project}/branches` (track, untrack) and
  `/admin/projects/{project}/sync`: admin token only, like every `/admin/` route.

It refuses to run git or to index by itself (`fathom.service.git_projects` does both).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from fathom.server.answers import refusal
from fathom.service.git_projects import WebhookRefused

HOOK_PREFIX = "/hooks/git/"


class GitProjectRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, description="the project's name")
    url: str = Field(min_length=1, max_length=2000, description="the git remote, without credentials")
    branches: list[str] = Field(default_factory=list, max_length=50,
                                description="branches to index, the default first (none: the remote's)")
    poll_s: float | None = Field(None, description="seconds between polls of the remote (none: webhook only)")


class BranchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    branch: str = Field(min_length=1, max_length=200)


def hooks_router(service: Any) -> APIRouter:
    router = APIRouter()

    @router.post(HOOK_PREFIX + "{project}", tags=["git"], openapi_extra={"security": []})
    async def push(project: str, request: Request) -> dict[str, Any]:
        """A forge's push event: synced when signed with the project's secret, else 401."""
        body = await request.body()
        try:
            return await service.git.webhook(project, dict(request.headers), body)
        except WebhookRefused as exc:
            raise refusal(401, str(exc)) from None

    return router


def git_admin_router(service: Any, require_admin: Any) -> APIRouter:
    router = APIRouter(prefix="/admin/projects", dependencies=[Depends(require_admin)])

    @router.post("/git", tags=["git"])
    async def add(body: GitProjectRequest) -> dict[str, Any]:
        """Clone a remote and index its branches. The answer holds the webhook secret: it is
        shown this once."""
        return await service.git.add(body.name, body.url, body.branches, poll_s=body.poll_s)

    @router.post("/{project}/branches", tags=["git"])
    async def track(project: str, body: BranchRequest) -> dict[str, Any]:
        return await service.git.track(project, body.branch)

    @router.delete("/{project}/branches/{branch:path}", tags=["git"])
    async def untrack(project: str, branch: str) -> dict[str, Any]:
        return await service.git.untrack(project, branch)

    @router.post("/{project}/sync", tags=["git"])
    async def sync(project: str) -> dict[str, Any]:
        return await service.git.sync(project)

    return router
