"""`fathom oauth`: the operator's commands for OAuth sign-in on a running server — `show` (the
issuer, the resource URL, how tokens are checked, the mapping from claims to projects) and
`set-mapping FILE` (replace the mapping with a JSON file, checked by the server before it is
written). Both go through the admin API with the admin token, like `fathom tokens`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from fathom.cli.admin import DEFAULT_SERVER, AdminError, ServerOpt, TokenOpt, connect, handled
from fathom.cli.output import console

oauth_app = typer.Typer(
    help="OAuth sign-in for MCP clients: show the set-up, set the claims-to-access mapping.",
    no_args_is_help=True,
)


def print_mapping(mapping: dict[str, Any]) -> None:
    t = Table(title=f"Mapping ({mapping.get('file')}); the first matching rule wins", title_justify="left")
    for col in ("#", "who", "projects", "may index"):
        t.add_column(col, overflow="fold")
    for n, rule in enumerate(mapping.get("rules", []), 1):
        projects = rule.get("projects")
        t.add_row(
            str(n),
            Text(rule.get("describes", "")),
            Text("every project" if projects is None else ", ".join(projects)),
            "yes" if rule.get("can_index") else "no",
        )
    console.print(t)
    if not mapping.get("rules"):
        console.print(
            "No rule yet: everyone who signs in is refused. Set one with `fathom oauth set-mapping FILE`."
        )


@oauth_app.command("show")
@handled
def oauth_show(server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None) -> None:
    """The issuer, resource URL, scopes, key set and mapping. Never a secret."""
    data = connect(server, token).call("GET", "/admin/oauth")
    static = "on" if data.get("static_mcp_tokens") else "off (OAuth only)"
    if not data.get("enabled"):
        console.print(Text(f"OAuth: off. Static MCP tokens: {static}.\n{data.get('note', '')}"))
        return
    for label, key in (
        ("issuer", "issuer"),
        ("resource", "resource"),
        ("audience", "audience"),
        ("metadata", "metadata_url"),
        ("checked by", "validation"),
        ("JWKS", "jwks_url"),
    ):
        value = data.get(key)
        if value:
            console.print(Text(f"{label:>10}: ", style="bold") + Text(str(value)))
    console.print(
        Text(f"{'scopes':>10}: ", style="bold") + Text(" ".join(data.get("scopes") or []) or "none required")
    )
    console.print(Text(f"{'static':>10}: ", style="bold") + Text(f"MCP tokens {static}"))
    print_mapping(data.get("mapping") or {})


@oauth_app.command("set-mapping")
@handled
def oauth_set_mapping(
    file: Annotated[
        Path,
        typer.Argument(
            help='A JSON mapping: {"rules": [{"match": {...}, "projects": [...], "can_index": false}]}.'
        ),
    ],
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
) -> None:
    """Replace the mapping from claims to projects and rights (the server checks it first)."""
    try:
        document = json.loads(file.read_text())
    except OSError as exc:
        raise AdminError(f"cannot read {file}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise AdminError(
            f"{file} is not JSON ({exc}); see docs/operator.md for the mapping's shape"
        ) from None
    print_mapping(connect(server, token).call("PUT", "/admin/oauth/mapping", document))


def register(app: typer.Typer) -> None:
    app.add_typer(oauth_app, name="oauth")
