"""What the operator's commands against a running fathom server share: the admin API client,
its typed failures and how they are printed, the `--server` / `--token` options, and the small
views more than one command prints. The commands live one module per group (`policy`, `key`,
`fleet`, `gate`, `budget`, `jobs`, `tokens`, `audit`, all attached by `operator`; and `oauth`).

Each command is one admin API call (or a few, for `--watch`) over HTTP, with the server from
`--server` / `FATHOM_SERVER` (default http://127.0.0.1:8765) and the admin token from
`--token` / `FATHOM_ADMIN_TOKEN`. Output is for a person: rich tables, and every refusal printed
with each of its problems and their fixes. Exit codes: 0 done; 2 the server refused the request
(bad input or configuration: nothing was changed); 1 anything else (server unreachable, token
refused, a provider refused by the gate, a push nobody acknowledged).

What it refuses: holding a command, or logic of its own (the server validates, decides and
answers), and importing any command group: they import it, never the other way.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Annotated, Any

import httpx
import typer
from rich.text import Text

from fathom.cli.options import server_url
from fathom.cli.output import console, err_console
from fathom.errors import ConfigError, FathomError

DEFAULT_SERVER = "http://127.0.0.1:8765"


# ---------------------------------------------------------------------------- errors


class AdminError(FathomError):
    """The admin API did not do what was asked. `problems` are shown one per line."""

    exit_code = 1

    def __init__(self, message: str, problems: list[str] | None = None, status: int | None = None):
        super().__init__(message)
        self.problems = [p for p in (problems or []) if p not in message]  # said once
        self.status = status


class AdminRefused(AdminError):
    """The server refused the request (400/404/409/413): nothing was changed."""

    exit_code = 2


class ServerUnreachable(AdminError):
    def __init__(self, server: str, reason: str):
        super().__init__(
            f"cannot reach the fathom server at {server} ({reason}); start it with "
            f"`fathom server`, or point --server / FATHOM_SERVER at it"
        )


class TokenRefused(AdminError):
    def __init__(self, server: str, detail: str):
        super().__init__(
            f"the server at {server} refused the admin token: {detail}. Pass the token the "
            f"server printed at its first start with --token or FATHOM_ADMIN_TOKEN"
        )


def show_failure(exc: AdminError) -> None:
    err_console.print(Text("error: ", style="bold red") + Text(" ".join(str(exc).split())))
    for p in exc.problems:
        err_console.print(Text("  • ", style="red") + Text(p))


def handled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn an `AdminError` into its printed problems and exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AdminError as exc:
            show_failure(exc)
            raise typer.Exit(exc.exit_code) from None
        except ConfigError as exc:
            show_failure(AdminError(str(exc), exc.problems))
            raise typer.Exit(2) from None

    return wrapper


# ---------------------------------------------------------------------------- the client


class AdminClient:
    """A thin synchronous client of the admin API. `transport` is for tests."""

    def __init__(
        self,
        server: str,
        token: str | None,
        *,
        timeout: float = 120.0,
        transport: httpx.BaseTransport | None = None,
    ):
        self.server = server.rstrip("/")
        if not token:
            raise AdminError(
                "no admin token: pass --token or set FATHOM_ADMIN_TOKEN (the server prints one "
                "at its first start)"
            )
        self._http = httpx.Client(
            base_url=self.server,
            timeout=timeout,
            transport=transport,
            headers={"Authorization": f"Bearer {token}"},
        )

    def call(self, method: str, path: str, body: Any = None) -> Any:
        try:
            r = (
                self._http.request(method, path, json=body)
                if body is not None
                else self._http.request(method, path)
            )
        except httpx.HTTPError as exc:
            raise ServerUnreachable(self.server, type(exc).__name__) from None
        data: Any
        try:
            data = r.json()
        except ValueError:
            data = None
        if r.is_success:
            return data
        message, problems = _detail(data, r)
        if r.status_code == 401:
            raise TokenRefused(self.server, message)
        if r.status_code in (400, 404, 409, 413):
            raise AdminRefused(message, problems, r.status_code)
        raise AdminError(f"the server answered {r.status_code}: {message}", problems, r.status_code)

    def close(self) -> None:
        self._http.close()


def _detail(data: Any, r: httpx.Response) -> tuple[str, list[str]]:
    detail = data.get("detail") if isinstance(data, dict) else None
    if isinstance(detail, dict):
        return str(detail.get("message") or r.reason_phrase), [str(p) for p in detail.get("problems") or []]
    if isinstance(detail, str):
        return detail, []
    return r.reason_phrase or f"HTTP {r.status_code}", []


# Tests replace this to route the CLI to an in-process app.
client_factory: Callable[[str, str | None], AdminClient] = AdminClient


ServerOpt = Annotated[
    str,
    typer.Option(
        "--server", envvar="FATHOM_SERVER", show_envvar=True, help="URL of the running fathom server."
    ),
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token", envvar="FATHOM_ADMIN_TOKEN", show_envvar=True, show_default=False, help="The admin token."
    ),
]


def connect(server: str, token: str | None) -> AdminClient:
    """A client of the server at `server`, refused (a `ConfigError`) when the admin token would
    cross the network in clear text: plain http:// goes to this machine only."""
    return client_factory(server_url(server), token)


def connect_group(ctx: typer.Context, server: str | None, token: str | None) -> AdminClient:
    """A client from a group's subcommand: its own --server / --token where given, else the
    group's (`fathom fleet --server URL list`), else the default server."""
    obj = ctx.obj or {}
    return connect(server or obj.get("server") or DEFAULT_SERVER, token or obj.get("token"))


LocalServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server", envvar="FATHOM_SERVER", show_default=False, help="URL of the running fathom server."
    ),
]


# ---------------------------------------------------------------------------- small views


def dash(v: Any) -> str:
    return "-" if v is None or v == "" else str(v)


def plain(v: Any, style: str = "") -> Text:
    """A table cell holding data: shown as it is, whatever brackets or colons it has."""
    return Text(dash(v), style=style)


def ago(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s:.1f}s" if s < 60 else f"{int(s // 60)}m{int(s % 60):02d}s"


def print_push(push: dict[str, Any]) -> None:
    acked, offline, failed, pending = push["acked"], push["offline"], push["failed"], push["pending"]
    console.print(
        Text("pushed to: ")
        + Text(", ".join(acked) or "no sidecar", style="bold")
        + Text(
            (f"; offline: {', '.join(offline)}" if offline else "")
            + (f"; pending approval (sent nothing): {', '.join(pending)}" if pending else "")
        )
    )
    for name, why in sorted(failed.items()):
        console.print(Text(f"  no acknowledgement from {name}", style="red") + Text(f": {why}"))


def print_whole(line: str) -> None:
    """A line a reader copies (a token, a client's command) written as it is, past rich: no
    console width, markup or style can break it, so it pastes whole from any terminal."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def print_mcp_client(url: str, bearer: str) -> None:
    """A ready MCP client configuration for `url`: Claude Code's command (other clients take the
    same URL and header). `bearer` is the token, or a shell expression that gives it. One line,
    never wrapped (`print_whole`), whatever the terminal's width."""
    print_whole(
        f'use it: claude mcp add --transport http fathom {url} --header "Authorization: Bearer {bearer}"'
    )
