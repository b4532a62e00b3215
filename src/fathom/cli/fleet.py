"""`fathom fleet`: the sidecars with their health (`list`, what `fathom fleet` alone prints),
approving and revoking them, and the join and host tokens they connect with (shown once).
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

import typer
from rich.table import Table
from rich.text import Text

from fathom.cli.admin import (
    DEFAULT_SERVER,
    LocalServerOpt,
    ServerOpt,
    TokenOpt,
    ago,
    connect,
    connect_group,
    handled,
    plain,
    print_whole,
)
from fathom.cli.output import console

fleet_app = typer.Typer(
    help="Sidecars: list (default), approve, revoke, tokens.", invoke_without_command=True
)


def print_fleet(data: dict[str, Any]) -> None:
    t = Table(title="Fleet", title_justify="left")
    for col in (
        "sidecar",
        "state",
        "connected",
        "key",
        "cloud",
        "last seen",
        "load",
        "in flight",
        "routes",
        "problems",
    ):
        t.add_column(col, overflow="fold")
    for s in data["sidecars"]:
        key = (
            plain("-")
            if s["key_present"] is None
            else (plain("present") if s["key_present"] else plain("missing", "red"))
        )
        state = {"approved": "green", "pending": "yellow", "revoked": "red"}.get(s["state"], "white")
        t.add_row(
            plain(s["name"]),
            plain(s["state"], state),
            plain("yes") if s["connected"] else plain("no", "red"),
            key,
            cloud_cell(s.get("cloud") or []),
            ago(s["last_seen_s"]),
            "-" if s["load"] is None else f"{s['load']:.2f}",
            str(s["in_flight"]),
            plain(", ".join(f"{r['role']}={r['backend']}" for r in s["routes"])),
            Text("; ".join(s["problems"]), style="red"),
        )
    console.print(t)
    for p in data["problems"]:
        console.print(Text("! ", style="yellow") + Text(p))
    last = data.get("last_push")
    console.print(
        Text(f"last key push: {last['at']}, acked by {', '.join(last['acked']) or 'nobody'}")
        if last
        else "no key has been pushed yet (`fathom key push`)"
    )


def cloud_cell(routes: list[dict[str, Any]]) -> Text:
    """What calls through the sidecar's cloud routes found: `serving`, `key rejected`... one
    word when they agree, else per route (serving only after a call or key check succeeded)."""
    if not routes:
        return plain("-")
    words = {r["state"].replace("_", " ") for r in routes}
    if len(words) == 1:
        word = words.pop()
        return plain(word, "green" if word == "serving" else "red" if word != "unchecked" else "")
    return Text("\n".join(f"{r['provider']}: {r['state'].replace('_', ' ')}" for r in routes))


@fleet_app.callback()
@handled
def fleet_main(ctx: typer.Context, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None) -> None:
    """The sidecars with their health; `fathom fleet` alone lists them."""
    ctx.obj = (ctx.obj or {}) | {"server": server, "token": token}
    if ctx.invoked_subcommand is None:
        print_fleet(connect(server, token).call("GET", "/admin/fleet"))


@fleet_app.command("list")
@handled
def fleet_list(ctx: typer.Context, server: LocalServerOpt = None, token: TokenOpt = None) -> None:
    """List the sidecars (approved, pending, offline) and the fleet's problems."""
    print_fleet(connect_group(ctx, server, token).call("GET", "/admin/fleet"))


@fleet_app.command("approve")
@handled
def fleet_approve(
    ctx: typer.Context,
    name: str,
    rebind: Annotated[
        bool,
        typer.Option(
            help="Hand the name to the host connected under it now, which another host's "
            "credential holds (a replaced or reinstalled host)."
        ),
    ] = False,
    pre_approve: Annotated[
        bool,
        typer.Option(
            "--pre-approve",
            help="Approve a name no sidecar has connected under yet; the first host "
            "to connect under it is bound to it.",
        ),
    ] = False,
    server: LocalServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Approve a sidecar: it gets work and config pushes from now on, bound to its host's credential."""
    query = "&".join(q for q, on in (("rebind=true", rebind), ("pre_approve=true", pre_approve)) if on)
    path = f"/admin/fleet/{quote(name, safe='')}/approve" + (f"?{query}" if query else "")
    s = connect_group(ctx, server, token).call("POST", path)
    console.print(
        Text(f"{name}: ")
        + Text(s["state"], style="green")
        + Text("" if s["connected"] else " (not connected now)")
    )


@fleet_app.command("revoke")
@handled
def fleet_revoke(
    ctx: typer.Context, name: str, server: LocalServerOpt = None, token: TokenOpt = None
) -> None:
    """Revoke a sidecar: it loses its work at once and is disconnected."""
    s = connect_group(ctx, server, token).call("POST", f"/admin/fleet/{quote(name, safe='')}/revoke")
    console.print(Text(f"{name}: ") + Text(s["state"], style="red"))


@fleet_app.command("token")
@handled
def fleet_token(
    ctx: typer.Context,
    name: Annotated[
        str | None, typer.Option(help="Issue a host token that pre-approves this sidecar name.")
    ] = None,
    server: LocalServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Issue a join token (or a host token for one sidecar name); shown once."""
    issued = connect_group(ctx, server, token).call(
        "POST", "/admin/fleet/tokens", {"name": name} if name else None
    )
    print_whole(f"{issued['kind']} token (shown once; only its hash is kept): {issued['token']}")
