"""`fathom budget`: the cloud budget the server holds (ceiling and its source, effective limit,
in flight, RPM window, cooldown, last 429), and its ceiling override set or removed.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from fathom.cli.admin import (
    DEFAULT_SERVER,
    AdminRefused,
    ServerOpt,
    TokenOpt,
    ago,
    connect,
    handled,
    plain,
)
from fathom.cli.output import console


@handled
def budget(
    override: Annotated[int | None, typer.Option(help="Set the ceiling override, 1-256 permits.")] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Remove the override.")] = False,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
) -> None:
    """The cloud budget: ceiling and its source, effective limit, in flight, window, cooldown."""
    client = connect(server, token)
    if override is not None and clear:
        raise AdminRefused("give --override N or --clear, not both")
    if override is not None or clear:
        b = client.call("PUT", "/admin/budget", {"override": None if clear else override})
        console.print("[green]override removed[/]" if clear else f"[green]override set to {override}[/]")
    else:
        b = client.call("GET", "/admin/budget")
    t = Table(title="Cloud budget", title_justify="left", show_header=False)
    t.add_column("", style="dim")
    t.add_column("")
    window = (
        f"{b['window']['count']} / {b['window']['allowance']} in {b['window']['seconds']:g}s"
        if b["window"]["armed"]
        else "not armed"
    )
    last = b["last_429"]
    for k, v in (
        ("ceiling", f"{b['ceiling']} ({b.get('ceiling_origin') or b['ceiling_source']})"),
        ("effective limit", b["effective"]),
        ("in flight", b["in_flight"]),
        ("waiting", sum(b["waiting"].values())),
        ("RPM window", window),
        ("cooldown left", f"{b['cooldown_left_s']:.1f}s" if b["in_cooldown"] else "none"),
        (
            "last 429",
            f"{last['kind']} {ago(last['ago_s'])} ago" + (" (halved)" if last["halved"] else "")
            if last
            else "never",
        ),
    ):
        t.add_row(k, plain(v))
    console.print(t)
