"""`fathom gate`: the compatibility gate's verdicts with their evidence, a provider probed now
(`verify`, exit 1 when the gate refuses it), the rows each verdict wrote (`audit`), and the
suspect rows re-embedded with a cleared encoder (`reembed`).
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from fathom.cli.admin import (
    DEFAULT_SERVER,
    AdminError,
    ServerOpt,
    TokenOpt,
    connect,
    handled,
    plain,
)
from fathom.cli.output import console

gate_app = typer.Typer(
    help="The compatibility gate: verdicts, verify now, audit, re-embed.", no_args_is_help=True
)


def print_verdicts(verdicts: list[dict[str, Any]], *, evidence: bool = False) -> None:
    t = Table(title="Gate verdicts", title_justify="left")
    for col in ("table", "provider", "status", "regime", "coverage", "min cosine", "reason"):
        t.add_column(col, overflow="fold")
    for v in verdicts:
        style = {"cleared": "green", "refused": "red", "quarantined": "red"}[v["status"]]
        coverage = Text("REDUCED", style="bold yellow") if v["reduced_coverage"] else Text(v["coverage"])
        mc = "-" if v["min_cosine"] is None else f"{v['min_cosine']:.4f}"
        t.add_row(
            plain(v["table"]),
            plain(v["provider"]),
            plain(v["status"], style),
            plain(v["regime"]),
            coverage,
            mc,
            plain(v["revoked_reason"] and f"revoked: {v['revoked_reason']}" or v["reason"]),
        )
    console.print(t)
    for v in verdicts:
        if v["reduced_coverage"]:
            console.print(Text(f"! {v['provider']} ({v['table']}): {v['coverage_note']}", style="yellow"))
        if evidence and v["cosines"]:
            c = Table(
                title=escape(f"{v['provider']}: cosine per probe (floor {v['threshold']})"),
                title_justify="left",
            )
            c.add_column("probe")
            c.add_column("cosine", justify="right")
            for probe, cos in sorted(v["cosines"].items(), key=lambda kv: kv[1]):
                c.add_row(plain(probe), Text(f"{cos:.4f}", style="green" if cos > v["threshold"] else "red"))
            console.print(c)


@gate_app.command("verdicts")
@handled
def gate_verdicts(
    history: Annotated[bool, typer.Option(help="Every verdict ever, not only the latest.")] = False,
    evidence: Annotated[bool, typer.Option(help="Also print the cosine of every probe.")] = False,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
) -> None:
    """The gate's verdicts with their evidence (minimum cosine, regime, coverage)."""
    data = connect(server, token).call(
        "GET", f"/admin/gate/verdicts?history={'true' if history else 'false'}"
    )
    if not data["verdicts"]:
        console.print("no verdict yet: `fathom gate verify PROVIDER` probes one now")
        return
    print_verdicts(data["verdicts"], evidence=evidence)
    c = data["counts"]
    console.print(f"{c['cleared']} cleared, {c['refused']} refused, {c['quarantined']} quarantined")


@gate_app.command("verify")
@handled
def gate_verify(
    provider: Annotated[str, typer.Argument(help="A live provider id (see `fathom policy show`).")],
    table: Annotated[str | None, typer.Option(help="code or docs (default: every table it serves).")] = None,
    force: Annotated[bool, typer.Option(help="Probe again even if a verdict exists.")] = False,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
) -> None:
    """Probe a provider now, under its role's policy; exit 1 if the gate refuses it."""
    body: dict[str, Any] = {"provider": provider, "force": force}
    if table:
        body["table"] = table
    data = connect(server, token).call("POST", "/admin/gate/verify", body)
    print_verdicts(data["verdicts"], evidence=True)
    refused = [v for v in data["verdicts"] if not v["cleared"]]
    if refused:
        raise AdminError(
            f"the gate refused {provider}",
            [
                f"{v['table']}: {v['reason']}. Serve this table from the "
                f"reference stack, or build a new index from this encoder"
                for v in refused
            ],
        )


@gate_app.command("audit")
@handled
def gate_audit(project: str, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None) -> None:
    """Rows per verdict, and rows a quarantined provider wrote since its last good check."""
    data = connect(server, token).call("GET", f"/admin/gate/audit/{quote(project, safe='')}")
    t = Table(title=escape(f"Rows of {project} per verdict"), title_justify="left")
    for col in ("table", "provider", "verdict", "status", "rows"):
        t.add_column(col, overflow="fold")
    for c in data["counts"]:
        t.add_row(
            plain(c["table"]),
            plain(c["provider"]),
            plain(c["verdict_id"]),
            plain(c["status"]),
            str(c["rows"]),
        )
    console.print(t)
    for s in data["suspects"]:
        console.print(
            Text(f"{s['rows']} suspect rows", style="red")
            + Text(
                f" in {s['table']} by quarantined {s['provider']} since "
                f"{s['last_good_check'] or 'its first write'}: {s['reason']}"
            )
        )
    if data["suspect_count"]:
        console.print(f"re-embed them with a cleared encoder: `fathom gate reembed {project}`")


@gate_app.command("reembed")
@handled
def gate_reembed(
    project: str,
    encoder: Annotated[str | None, typer.Option(help="A cleared provider id.")] = None,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
) -> None:
    """Re-embed exactly the suspect rows the audit lists."""
    data = connect(server, token).call(
        "POST", f"/admin/gate/reembed/{quote(project, safe='')}", {"encoder": encoder} if encoder else None
    )
    console.print(
        Text(
            f"re-embedded {data['total']} rows with {data['encoder']}"
            + "".join(f"; {t}: {n}" for t, n in data["rows"].items())
        )
    )
