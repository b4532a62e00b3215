"""`fathom policy`: each role's route as the running server holds it (policy, model, upstream
pin, width, fallback, and the providers serving it), shown (`show`) or changed (`set`).

It decides nothing: the server validates a change whole before applying any of it, and this
prints its answer (the applied change, the push to the sidecars and the role's new route, or
the refusal with each of its problems).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from fathom.cli.admin import (
    DEFAULT_SERVER,
    AdminRefused,
    ServerOpt,
    TokenOpt,
    connect,
    dash,
    handled,
    plain,
    print_push,
)
from fathom.cli.output import console

policy_app = typer.Typer(
    help="Each role's route: policy, model, upstream pin, width, fallback.", no_args_is_help=True
)


def roles_table(roles: dict[str, Any], only: str | None = None) -> Table:
    t = Table(title="Roles", title_justify="left")
    for col in ("role", "table", "policy", "model", "upstream", "width", "fallback", "serving", "notes"):
        t.add_column(col, overflow="fold")
    for name, r in roles.items():
        if only and name != only:
            continue
        serving = Text(
            "\n".join(serving_line(p) for p in r["providers"] if p["id"] in r["serving"]) or "none",
            style="" if r["serving"] else "red",
        )
        if not r["serving"] and r.get("configured") is False:  # optional, and nobody set it up: neutral
            serving = Text("not configured", style="dim")
        notes = "\n".join([*r["warnings"], *r["unavailable"]])
        t.add_row(
            plain(name),
            plain(r["table"]),
            plain(r["policy"], "bold"),
            plain(r["model"]),
            plain(r["upstream"]),
            plain(r["width"]),
            plain(r["fallback"]),
            serving,
            Text(notes, style="yellow"),
        )
    return t


def serving_line(p: dict[str, Any]) -> str:
    """A provider id as the API gives it, and for a cloud route what its calls found."""
    return str(p["id"]) + (f" ({p['health'].replace('_', ' ')})" if p["kind"] == "cloud" else "")


@policy_app.command("show")
@handled
def policy_show(
    role: Annotated[str | None, typer.Argument(help="Only this role.")] = None,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
) -> None:
    """Show every role's route and the providers serving it."""
    data = connect(server, token).call("GET", "/admin/policies")
    if role is not None and role not in data["roles"]:
        raise AdminRefused(f"unknown role {role!r}: use one of {', '.join(data['roles'])}")
    console.print(roles_table(data["roles"], role))


@policy_app.command("set")
@handled
def policy_set(
    role: Annotated[str, typer.Argument(help="embedding, code-embedding, reranker, code-assistant or rlm.")],
    policy: Annotated[str | None, typer.Option(help="local, cloud, aggregate or backup.")] = None,
    model: Annotated[str | None, typer.Option(help="The model id.")] = None,
    upstream: Annotated[
        str | None, typer.Option(help="The OpenRouter upstream pin (embedding roles).")
    ] = None,
    no_upstream: Annotated[bool, typer.Option("--no-upstream", help="Remove the upstream pin.")] = False,
    width: Annotated[int | None, typer.Option(help="The table's width (embedding roles).")] = None,
    fallback: Annotated[str | None, typer.Option(help="any or local-only.")] = None,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
) -> None:
    """Change one role's route. The server validates first; a refusal changes nothing."""
    change: dict[str, Any] = {
        k: v
        for k, v in (
            ("policy", policy),
            ("model", model),
            ("upstream", upstream),
            ("width", width),
            ("fallback", fallback),
        )
        if v is not None
    }
    if no_upstream:
        if upstream is not None:
            raise AdminRefused("give --upstream or --no-upstream, not both")
        change["upstream"] = None
    if not change:
        raise AdminRefused(
            f"nothing to change for {role}: give --policy, --model, --upstream, --width or --fallback"
        )
    data = connect(server, token).call("PUT", "/admin/policies", {role: change})
    console.print(
        Text("applied", style="green")
        + Text(f" to {role}: " + ", ".join(f"{k} = {dash(v)}" for k, v in change.items()))
    )
    print_push(data["push"])
    console.print(roles_table(data["roles"], role))
