"""The operator's commands against a running fathom server: policy, key, fleet, gate, budget, jobs,
MCP tokens and the audit log.

Each command is one admin API call (or a few, for `--watch`) over HTTP, with the server from
`--server` / `FATHOM_SERVER` (default http://127.0.0.1:8765) and the admin token from
`--token` / `FATHOM_ADMIN_TOKEN`. Output is for a person: rich tables, and every refusal printed
with each of its problems and their fixes. Exit codes: 0 done; 2 the server refused the request
(bad input or configuration: nothing was changed); 1 anything else (server unreachable, token
refused, a provider refused by the gate, a push nobody acknowledged).

It refuses to take the OpenRouter key from the command line, where the shell history and the
process list would keep it: `fathom key push` reads it from stdin or a hidden prompt, and
`--key` is refused with the way to do it. It never prints the key, and drops it after the call.
It holds no logic of its own: the server validates, decides and answers.
"""

from __future__ import annotations

import functools
import getpass
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import httpx
import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
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


# ---------------------------------------------------------------------------- small views


def dash(v: Any) -> str:
    return "-" if v is None or v == "" else str(v)


def plain(v: Any, style: str = "") -> Text:
    """A table cell holding data: shown as it is, whatever brackets or colons it has."""
    return Text(dash(v), style=style)


def eta(job: dict[str, Any]) -> str:
    """A job's time left, only while it runs: a paused or finished job has no ETA."""
    return ago(job["eta_s"]) if job["state"] == "running" else "-"


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


# ---------------------------------------------------------------------------- policy

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


# ---------------------------------------------------------------------------- key

key_app = typer.Typer(help="The OpenRouter key: pushed to the sidecars, never stored.", no_args_is_help=True)


def read_key() -> str:
    """From stdin when it is not a terminal (a pipe, a file), else from a hidden prompt."""
    if not sys.stdin.isatty():
        key = sys.stdin.read().strip()
    else:
        key = getpass.getpass("OpenRouter key (input hidden): ").strip()
    if not key:
        raise AdminRefused(
            "no key given: pipe it on stdin (e.g. `fathom key push < keyfile`) or type it at the prompt"
        )
    return key


@key_app.command("push")
@handled
def key_push(
    without_key: Annotated[
        bool, typer.Option("--without-key", help="Re-push the routing only; sidecars keep the key they hold.")
    ] = False,
    forget: Annotated[
        bool, typer.Option("--forget", help="Tell the sidecars to drop the key they hold.")
    ] = False,
    key_arg: Annotated[str | None, typer.Option("--key", hidden=True)] = None,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
) -> None:
    """Push the OpenRouter key (from stdin or a hidden prompt) to every approved, connected sidecar."""
    if key_arg is not None:
        key_arg = None
        raise AdminRefused(
            "refusing a key on the command line: the shell history and the process list would "
            "keep it. Pipe it on stdin (`fathom key push < keyfile`) or type it at the prompt"
        )
    client = connect(server, token)
    body: dict[str, Any] = {"forget_key": True} if forget else {}
    if not without_key and not forget:
        body["key"] = read_key()
    try:
        push = client.call("POST", "/admin/key", body)
    finally:
        body.clear()  # drop our reference to the key
    print_push(push)
    if (push["key_sent"] or forget) and not push["acked"]:
        raise AdminError(
            "no sidecar acknowledged the push, so no sidecar holds the key: approve and connect a "
            "sidecar (`fathom fleet`), then push again"
        )


# ---------------------------------------------------------------------------- fleet

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


def _conn(ctx: typer.Context, server: str | None, token: str | None) -> AdminClient:
    obj = ctx.obj or {}
    return connect(server or obj.get("server") or DEFAULT_SERVER, token or obj.get("token"))


LocalServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server", envvar="FATHOM_SERVER", show_default=False, help="URL of the running fathom server."
    ),
]


@fleet_app.command("list")
@handled
def fleet_list(ctx: typer.Context, server: LocalServerOpt = None, token: TokenOpt = None) -> None:
    """List the sidecars (approved, pending, offline) and the fleet's problems."""
    print_fleet(_conn(ctx, server, token).call("GET", "/admin/fleet"))


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
    s = _conn(ctx, server, token).call("POST", path)
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
    s = _conn(ctx, server, token).call("POST", f"/admin/fleet/{quote(name, safe='')}/revoke")
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
    issued = _conn(ctx, server, token).call("POST", "/admin/fleet/tokens", {"name": name} if name else None)
    print_whole(f"{issued['kind']} token (shown once; only its hash is kept): {issued['token']}")


# ---------------------------------------------------------------------------- gate

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


# ---------------------------------------------------------------------------- budget


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


# ---------------------------------------------------------------------------- jobs

jobs_app = typer.Typer(
    help="Index jobs on the server: list (default), start, show, pause, resume, cancel.",
    invoke_without_command=True,
)


def print_jobs(jobs: list[dict[str, Any]]) -> None:
    t = Table(title="Index jobs", title_justify="left")
    for col in ("job", "project", "state", "phase", "progress", "rate", "eta"):
        t.add_column(col, overflow="fold")
    for j in jobs:
        t.add_row(
            plain(j["id"]),
            plain(j["project"]),
            plain(j["state"] + (f": {j['error']}" if j["error"] else "")),
            plain(j["phase"]),
            f"{j['chunks_done']}/{j['chunks_total']} ({j['percent']:.0f}%)",
            f"{j['rate']:.1f}/s" if j["rate"] else "-",
            eta(j),
        )
    console.print(t if jobs else "no index job has run on this server yet")


def watch(client: AdminClient, job: dict[str, Any], interval: float = 0.5) -> dict[str, Any]:
    with Progress(
        TextColumn("[bold blue]{task.fields[phase]:<13}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        task = bar.add_task(job["project"], total=None, phase=job["phase"], rate="")
        while not job["finished"] and job["state"] != "interrupted":
            time.sleep(interval)
            job = client.call("GET", f"/admin/jobs/{job['id']}")
            bar.update(
                task,
                total=job["chunks_total"] or None,
                completed=job["chunks_done"],
                phase=job["phase"],
                rate=f"{job['rate']:.1f} chunks/s" if job["rate"] else "",
            )
    return job


def finish(job: dict[str, Any]) -> None:
    print_jobs([job])
    if job["state"] == "failed":
        raise AdminError(f"job {job['id']} failed: {job['error']}")


@jobs_app.callback()
@handled
def jobs_main(ctx: typer.Context, server: ServerOpt = DEFAULT_SERVER, token: TokenOpt = None) -> None:
    """Index jobs with live progress; `fathom jobs` alone lists them."""
    ctx.obj = (ctx.obj or {}) | {"server": server, "token": token}
    if ctx.invoked_subcommand is None:
        print_jobs(connect(server, token).call("GET", "/admin/jobs")["jobs"])


@jobs_app.command("list")
@handled
def jobs_list(ctx: typer.Context, server: LocalServerOpt = None, token: TokenOpt = None) -> None:
    """List every job on the server with its progress (what `fathom jobs` alone prints)."""
    print_jobs(_conn(ctx, server, token).call("GET", "/admin/jobs")["jobs"])


@jobs_app.command("start")
@handled
def jobs_start(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="The project folder (as the server sees it).")],
    project: Annotated[str | None, typer.Option(help="Project name (default: the folder's name).")] = None,
    full: Annotated[bool, typer.Option(help="Rebuild in a shadow table.")] = False,
    watch_it: Annotated[bool, typer.Option("--watch", help="Follow its progress until it ends.")] = False,
    server: LocalServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Start indexing a folder on the server."""
    root = path.expanduser().resolve()
    client = _conn(ctx, server, token)
    job = client.call(
        "POST", "/admin/jobs", {"path": str(root), "project": project or root.name, "full": full}
    )
    console.print(
        Text("started job ") + Text(job["id"], style="bold") + Text(f" for {job['project']} ({root})")
    )
    if watch_it:
        finish(watch(client, job))


@jobs_app.command("show")
@handled
def jobs_show(
    ctx: typer.Context,
    job_id: str,
    watch_it: Annotated[bool, typer.Option("--watch", help="Follow its progress until it ends.")] = False,
    server: LocalServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """One job's progress."""
    client = _conn(ctx, server, token)
    job = client.call("GET", f"/admin/jobs/{quote(job_id, safe='')}")
    finish(watch(client, job) if watch_it else job)


def _job_action(action: str) -> Callable[..., None]:
    @handled
    def command(
        ctx: typer.Context, job_id: str, server: LocalServerOpt = None, token: TokenOpt = None
    ) -> None:
        job = _conn(ctx, server, token).call("POST", f"/admin/jobs/{quote(job_id, safe='')}/{action}")
        console.print(Text(f"job {job_id}: {action} requested; now {job['state']}"))

    command.__doc__ = {
        "pause": "Pause a job (it stops between batches).",
        "resume": "Resume a paused job, or one a server stop or crash interrupted.",
        "cancel": "Cancel a job (the active table is unchanged).",
    }[action]
    return command


for _action in ("pause", "resume", "cancel"):
    jobs_app.command(_action)(_job_action(_action))


# ---------------------------------------------------------------------------- MCP tokens

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


# ---------------------------------------------------------------------------- wiring


def register(app: typer.Typer) -> None:
    """Attach the operator commands to the `fathom` app."""
    app.add_typer(policy_app, name="policy")
    app.add_typer(key_app, name="key")
    app.add_typer(fleet_app, name="fleet")
    app.add_typer(gate_app, name="gate")
    app.add_typer(jobs_app, name="jobs")
    app.add_typer(tokens_app, name="tokens")
    app.command("budget")(budget)
    app.command("audit-log")(audit_log)
