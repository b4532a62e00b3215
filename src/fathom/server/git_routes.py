"""The server's side of projects from git: the forges' push webhook, the operator's git admin
API, and the MCP tool `add_git_project` (a search at a `ref` is a field of the search request:
`fathom.index.request`).

* `POST /hooks/git/{project}`: a push event from GitHub, Gitea or GitLab. The guard lets it
  through without a bearer token; this route answers 401 unless the body carries a valid
  signature for the project's own secret (HMAC-SHA256 in `X-Hub-Signature-256` or
  `X-Gitea-Signature`, or GitLab's `X-Gitlab-Token`), checked before the body is parsed, so an
  unsigned call changes nothing. An unknown project is refused the same way (no oracle). A
  signed push to a tracked branch is answered 202 at once (a forge waits about ten seconds
  for a delivery); the fetch and the re-index of what it changed run after the answer.
* `/admin/projects/git` (add), `/admin/projects/{project}/branches` (track, untrack) and
  `/admin/projects/{project}/sync` (sync now; `GET`: the last sync's outcome, whoever asked
  for it): admin token only, like every `/admin/` route.

It refuses to run git or to index by itself (`fathom.service.git_projects` does both).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from fathom.server.answers import refusal
from fathom.server.mcp_common import ProjectName, tool_errors
from fathom.service.git_syncs import WebhookRefused

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from fathom.service.ports import GitService

HOOK_PREFIX = "/hooks/git/"


class GitProjectRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, description="the project's name")
    url: str = Field(min_length=1, max_length=2000, description="the git remote, without credentials")
    branches: list[str] = Field(
        default_factory=list,
        max_length=50,
        description="branches to index, the default first (none: the remote's)",
    )
    poll_s: float | None = Field(None, description="seconds between polls of the remote (none: webhook only)")


class BranchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    branch: str = Field(min_length=1, max_length=200)


def hooks_router(service: GitService) -> APIRouter:
    router = APIRouter()

    @router.post(
        HOOK_PREFIX + "{project}",
        tags=["git"],
        openapi_extra={"security": []},
        responses={202: {"description": "a push to a tracked branch: synced after this answer"}},
    )
    async def push(project: str, request: Request, response: Response) -> dict[str, Any]:
        """A forge's push event: when signed with the project's secret, a push to a tracked
        branch is answered 202 and synced in the background; unsigned, 401."""
        body = await request.body()
        try:
            answer: dict[str, Any] = await service.git.webhook(project, dict(request.headers), body)
        except WebhookRefused as exc:
            raise refusal(401, str(exc)) from None
        if answer["queued"]:
            response.status_code = 202
        return answer

    return router


def git_admin_router(service: GitService, require_admin: Any) -> APIRouter:
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
        """Fetch now and re-index what changed on every tracked branch; answers when done."""
        await asyncio.to_thread(service.git.record, project)  # a project not from git: refused
        result: dict[str, Any] = await service.git.syncs.run(project, None, "operator")
        return result

    @router.get("/{project}/sync", tags=["git"])
    async def sync_status(project: str) -> dict[str, Any]:
        """Whether a sync runs now, the branches pushed since it began, and the last sync's
        outcome (a webhook's, the poll loop's or an operator's; none since this start: null)."""
        await asyncio.to_thread(service.git.record, project)  # a project not from git: refused
        status: dict[str, Any] = service.git.syncs.status(project)
        return status

    return router


# ---- MCP: adding a project from git


class GitProjectAdded(BaseModel):
    project: str
    url: str = Field(description="the remote, any credentials removed")
    default: str = Field(description="the default branch: searches without a ref read it")
    branches: dict[str, str] = Field(description="each tracked branch and the commit indexed")
    webhook: str = Field(
        description="the push webhook's path on this server; its secret is "
        "given to the operator only (DATA_DIR/git/NAME/webhook.secret)"
    )
    poll_s: float | None = None


def register_git_tools(server: MCPServer, fathom: GitService) -> None:
    """`add_git_project`: a tool that writes, so only tokens allowed to index see or call it.
    Listed only while the server allows some remote (FATHOM_GIT_REMOTES): without one it could
    only refuse, and its description would cost every agent's context for nothing."""

    @server.tool(
        title="Add a project from git",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True
        ),
        description="Clone a git remote the server allows and index its branches "
        "(the first is the default); searches then take ref=BRANCH, a "
        "tag or a commit.",
    )
    @tool_errors
    async def add_git_project(
        project: ProjectName,
        url: Annotated[
            str,
            Field(
                description="The remote, e.g. https://host/team/repo.git, without credentials.",
                min_length=1,
                max_length=2000,
            ),
        ],
        branches: Annotated[
            list[str] | None,
            Field(description="Branches, the default first; null: the remote's default.", max_length=50),
        ] = None,
    ) -> GitProjectAdded:
        added = await fathom.git.add(project, url, branches or [])
        return GitProjectAdded(
            project=added["project"],
            url=added["url"],
            default=added["default"],
            branches=added["branches"],
            webhook=added["webhook"],
            poll_s=added["poll_s"],
        )

    only_when = getattr(server, "only_when", None)
    if only_when is not None:  # read at every listing: the settings a test or reload changes
        only_when("add_git_project", lambda: bool(fathom.settings.git_remote_list()))
