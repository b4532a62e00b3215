"""`fathom audit-log`: the server's audit log, every admin action with who (which token) did
it, when and its outcome.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from fathom.cli.admin import (
    DEFAULT_SERVER,
    ServerOpt,
    TokenOpt,
    connect,
    handled,
    plain,
)
from fathom.cli.output import console


@handled
def audit_log(
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, max=10_000, help="How many of the latest entries.")
    ] = 50,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
) -> None:
    """The audit log: every admin action on the server, who (which token) did it and when."""
    data = connect(server, token).call("GET", f"/admin/audit?limit={limit}")
    t = Table(title=escape(f"Audit log ({data['path']})"), title_justify="left")
    for col in ("when", "who", "what", "outcome"):
        t.add_column(col, overflow="fold")
    for e in data["entries"]:
        outcome = str(e.get("outcome"))
        t.add_row(
            plain(e.get("at")),
            plain(e.get("who")),
            plain(e.get("what")),
            Text(outcome, style="green" if outcome == "ok" else "red"),
        )
    console.print(t if data["entries"] else "the audit log is empty: no admin action yet")
