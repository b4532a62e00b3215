"""`fathom search` and `fathom projects` answered by a running server instead of in-process,
and the writes that take `--server` (`fathom drop`, `fathom watching`, `fathom projects add|track|untrack|sync`)
through a `fathom server`'s admin API.

A `fathom serve` or `fathom server` keeps its encoder loaded; a CLI that loads its own pays
seconds of start-up for every search. So the CLI first looks for a server: `--server URL`
(FATHOM_SERVER), or the one this data dir's run file names (`fathom.local_server`: a serve's,
else the background Fathom's; written by the serving process, 0600, removed at its stop; a
stale one is ignored). Found, the
search goes to its `/local/` routes (`server.local`), which answer exactly what the in-process
search prints; none, the caller searches in-process.

Authentication never puts a token on a command line or in a log: the data dir's file carries
the token of that server's run (readable by the same user only); for any other `--server`, the
token comes from the environment (FATHOM_ADMIN_TOKEN for a `fathom server`, FATHOM_MCP_TOKEN
for a `fathom serve` whose token the operator chose).

It refuses to fall back silently where the user named a server: an explicit `--server` that
cannot be reached is an error naming it. A server found only through the file that cannot be
reached (it is stopping, or its file outlived it) is skipped, and the search runs in-process.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fathom.cli.options import server_url
from fathom.config import Settings
from fathom.errors import ConfigError, FathomError

# How long a request to the server may take before the CLI says what it is waiting for.
SAY_AFTER_S = 1.0
TIMEOUT_S = 600.0


class ServerUnreachable(FathomError):
    """The server named with --server (or FATHOM_SERVER) did not answer."""

    def __init__(self, url: str, reason: str):
        self.url = url
        super().__init__(
            f"cannot reach the fathom server at {url} ({reason}); start it (`fathom serve` or "
            f"`fathom server`), or leave out --server (and unset FATHOM_SERVER) to search in-process"
        )


class ServerRefused(FathomError):
    """The server answered the search with a refusal (its message says why)."""


class ServerRefusedInput(ServerRefused, ConfigError):
    """A refusal of the request itself (400, 404): bad input, as in-process."""


@dataclass(frozen=True)
class Target:
    """Where to send the CLI's reads: a URL and the token it takes (never shown)."""

    url: str
    token: str = field(repr=False)
    kind: str = "server"
    explicit: bool = False


def target_of(data_dir: Path, server: str | None) -> Target | None:
    """The server to ask, or None: search in-process."""
    from fathom.local_server import read_local_server

    local = read_local_server(data_dir)
    if server is None:
        return Target(local.url, local.token, local.kind) if local is not None else None
    url = server_url(server)
    if local is not None and local.url.rstrip("/") == url:
        return Target(url, local.token, local.kind, explicit=True)
    settings = Settings()
    token = Settings.secret(settings.admin_token) or Settings.secret(settings.mcp_token)
    if not token:
        raise ConfigError(
            f"no token for the server at {url}: it is not the server this data dir's own "
            f"`fathom serve`/`fathom server` runs (whose token the CLI reads itself), so set "
            f"FATHOM_ADMIN_TOKEN (a `fathom server`) or FATHOM_MCP_TOKEN (a `fathom serve`) in the "
            f"environment, or pass --data-dir of that server"
        )
    return Target(url, token, explicit=True)


def call(
    target: Target, method: str, path: str, body: Any = None, *, say: Callable[[str], None] | None = None
) -> dict[str, Any] | None:
    """One request to the server's `/local/` routes: its JSON answer, or None when a server
    found only through the data dir's file did not answer (search in-process then). While it
    takes longer than `SAY_AFTER_S`, `say` is told what it waits for."""
    import httpx

    def send() -> httpx.Response:
        # trust_env=False: a proxy from the environment would get the run's token in plain
        # HTTP (and could not reach this loopback server anyway).
        with httpx.Client(
            base_url=target.url,
            timeout=httpx.Timeout(TIMEOUT_S, connect=5.0),
            headers={"Authorization": f"Bearer {target.token}"},
            trust_env=False,
        ) as http:
            return http.request(method, path, json=body)

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(send)
        try:
            try:
                response = pending.result(timeout=SAY_AFTER_S)
            except concurrent.futures.TimeoutError:
                if say is not None:
                    say(
                        f"waiting for the fathom {target.kind} at {target.url} (it may still be loading its "
                        f"encoder)…"
                    )
                response = pending.result()
        except httpx.HTTPError as exc:
            if target.explicit:
                raise ServerUnreachable(target.url, type(exc).__name__) from None
            return None
    return answer(target, response)


def answer(target: Target, response: Any) -> dict[str, Any]:
    """The JSON of a successful answer; a refusal as the typed error it names."""
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.is_success and isinstance(data, dict):
        return data
    detail = data.get("detail") if isinstance(data, dict) else None
    message = (detail.get("message") if isinstance(detail, dict) else detail) or response.reason_phrase
    if response.status_code == 401:
        raise ServerRefused(
            f"the fathom {target.kind} at {target.url} refused the token: "
            + (
                "its data dir's file is out of date; run the command again"
                if not target.explicit
                else "set FATHOM_ADMIN_TOKEN (or FATHOM_MCP_TOKEN) to a token it takes"
            )
        )
    if response.status_code in (400, 404, 409):
        raise ServerRefusedInput(str(message))
    raise ServerRefused(
        f"the fathom {target.kind} at {target.url} answered {response.status_code}: {message}"
    )


def hits_of(data: dict[str, Any]) -> list[Any]:
    """The server's hits as objects the CLI prints as it prints its own."""
    return [SimpleNamespace(**h) for h in data.get("hits") or []]


def projects_of(data: dict[str, Any]) -> list[Any]:
    return [SimpleNamespace(**p) for p in data.get("projects") or []]


# ---------------------------------------------------------------- `fathom drop --server`


class AdminSession:
    """The admin API of the `fathom server` at a `--server` URL, for a CLI command that writes
    (`fathom drop`, `fathom watching`, `fathom projects add|track|untrack|sync`).

    A write takes the admin token, and only from FATHOM_ADMIN_TOKEN: never from the command
    line (the shell history and the process list keep what is typed there), never a data
    dir's local token (that one reads and nothing else). A `fathom serve` has no admin API:
    refused, saying to run the command on its machine without --server."""

    def __init__(self, server: str, doing: str):
        import httpx

        from fathom.cli.admin import AdminClient
        from fathom.cli.admin import ServerUnreachable as AdminUnreachable

        self.url = url = server_url(server)
        try:  # a `fathom server` answers /health to anyone; a `fathom serve` has no such route
            health = httpx.get(f"{url}/health", timeout=httpx.Timeout(30.0, connect=5.0))
        except httpx.HTTPError as exc:
            raise AdminUnreachable(url, type(exc).__name__) from None
        if health.status_code == 404:
            raise NoAdminApi(url, doing)
        token = Settings.secret(Settings().admin_token)
        if not token:
            raise ConfigError(
                f"{doing} through the fathom server at {url} takes its admin token: set "
                f"FATHOM_ADMIN_TOKEN in the environment (never on the command line, where the "
                f"shell history keeps it), or run the command on the server's machine without "
                f"--server"
            )
        self.client = AdminClient(url, token, timeout=TIMEOUT_S)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        from fathom.cli.admin import TokenRefused

        try:
            return self.client.call(method, path, body)
        except TokenRefused:
            raise ServerRefused(
                f"the fathom server at {self.url} refused the admin token in FATHOM_ADMIN_TOKEN: "
                f"set it to the admin token that server printed at its first start"
            ) from None

    def __enter__(self) -> AdminSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()


def drop_through(server: str, project: str, confirm: Callable[[], None]) -> dict[str, Any]:
    """Drop `project` through the admin API of the `fathom server` at `server`: the rows it
    removed. `confirm` runs once the project is known to be there (it aborts to refuse)."""
    from urllib.parse import quote

    from fathom.index.store import UnknownProject

    with AdminSession(server, "dropping") as admin:
        listed = admin.call("GET", "/admin/projects")
        names = [p["name"] for p in listed.get("projects") or []]
        if project not in names:
            raise UnknownProject(project, names)
        refuse_tracked_branch(project, listed["projects"])
        confirm()
        return dict(admin.call("DELETE", f"/admin/projects/{quote(project, safe='')}"))


def refuse_tracked_branch(project: str, listed: list[dict[str, Any]]) -> None:
    """As the server would refuse it, before asking: the index of a branch its git project
    (as `GET /admin/projects` lists them) tracks is not dropped on its own."""
    of = next((p.get("branch_of") for p in listed if p["name"] == project), None)
    parent = next((p.get("git") for p in listed if of and p["name"] == of["project"]), None)
    if of and parent and of["branch"] in parent["branches"]:
        from fathom.service.git_projects import BranchDropRefused

        raise BranchDropRefused(project, of["project"], of["branch"])


def watch_through(server: str, project: str, on: bool | None) -> dict[str, Any]:
    """A project's live sync on the `fathom server` at `server` (turned on or off first, unless
    `on` is None): its watch state as that server's watcher has it."""
    from urllib.parse import quote

    doing = "showing live sync" if on is None else "changing live sync"
    with AdminSession(server, doing) as admin:
        path = f"/admin/projects/{quote(project, safe='')}"
        if on is None:
            return dict(admin.call("GET", path)["watch"])
        return dict(admin.call("PUT", path + "/watch", {"enabled": on})["watch"])


class NoAdminApi(ServerRefused, ConfigError):
    """A write with `--server` at a `fathom serve`: it serves MCP tools and searches, no admin API."""

    def __init__(self, url: str, doing: str = "dropping"):
        self.url = url
        super().__init__(
            f"the server at {url} has no admin API for {doing} (a `fathom serve` answers "
            f"searches only): run the command on its machine without --server (and with FATHOM_SERVER "
            f"unset), with its data dir, or point --server at a `fathom server`"
        )
