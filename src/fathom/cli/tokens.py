"""`fathom tokens`: the MCP tokens developers' MCP clients sign in with, created (printed once,
with a ready client command; only the hash is kept), listed (never a token) and revoked.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

import typer
from rich.table import Table
from rich.text import Text

from fathom.cli.admin import (
    DEFAULT_SERVER,
    ServerOpt,
    TokenOpt,
    connect,
    handled,
    plain,
    print_mcp_client,
    print_whole,
)
from fathom.cli.output import console

tokens_app = typer.Typer(
    help="MCP tokens for developers' MCP clients: create, list, revoke.", no_args_is_help=True
)


def print_tokens(data: dict[str, Any]) -> None:
    t = Table(title="MCP tokens", title_justify="left")
    for col in ("name", "projects", "may index", "created"):
        t.add_column(col, overflow="fold")
    for r in data["tokens"]:
        t.add_row(
            plain(r["name"]),
            plain(", ".join(r["projects"]) if r["projects"] else "every project"),
            "yes" if r["can_index"] else "no",
            plain(r["created_at"]),
        )
    console.print(t if data["tokens"] else "no MCP token yet: `fathom tokens create --name NAME`")
    roots = data.get("index_roots") or []
    console.print(
        "index roots (FATHOM_INDEX_ROOTS): "
        + (", ".join(roots) if roots else "none: no folder can be indexed over MCP")
    )


@tokens_app.command("create")
@handled
def tokens_create(
    name: Annotated[str, typer.Option("--name", help="Who the token is for (the audit log names it).")],
    project: Annotated[
        list[str] | None,
        typer.Option("--project", "-p", help="A project it sees (repeatable; none: every project)."),
    ] = None,
    can_index: Annotated[
        bool, typer.Option("--can-index", help="It may call index_project, under FATHOM_INDEX_ROOTS only.")
    ] = False,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
) -> None:
    """Create an MCP token; it is printed once, and only its hash is kept."""
    created = connect(server, token).call(
        "POST", "/admin/tokens", {"name": name, "projects": project or None, "can_index": can_index}
    )
    scope = ", ".join(created["projects"]) if created["projects"] else "every project"
    print_whole(f"MCP token for {created['name']} (shown once; only its hash is kept): {created['token']}")
    console.print(
        Text(
            f"it sees: {scope}; "
            + ("it may index under FATHOM_INDEX_ROOTS" if created["can_index"] else "read-only")
        )
    )
    print_mcp_client(f"{server.rstrip('/')}/mcp", created["token"])


@tokens_app.command("list")
@handled
def tokens_list(server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None) -> None:
    """Every MCP token: name, projects, whether it may index. Never a token."""
    print_tokens(connect(server, token).call("GET", "/admin/tokens"))


@tokens_app.command("revoke")
@handled
def tokens_revoke(name: str, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None) -> None:
    """Revoke an MCP token: its next request is refused."""
    connect(server, token).call("POST", f"/admin/tokens/{quote(name, safe='')}/revoke")
    console.print(Text(f"{name}: ") + Text("revoked", style="red"))
