"""`fathom jobs`: index jobs on the server (`list`, what `fathom jobs` alone prints), started,
followed with live progress (`--watch`), paused, resumed and cancelled.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from fathom.cli.admin import (
    DEFAULT_SERVER,
    AdminClient,
    AdminError,
    LocalServerOpt,
    ServerOpt,
    TokenOpt,
    ago,
    connect,
    connect_group,
    handled,
    plain,
)
from fathom.cli.output import console

jobs_app = typer.Typer(
    help="Index jobs on the server: list (default), start, show, pause, resume, cancel.",
    invoke_without_command=True,
)


def eta(job: dict[str, Any]) -> str:
    """A job's time left, only while it runs: a paused or finished job has no ETA."""
    return ago(job["eta_s"]) if job["state"] == "running" else "-"


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
    print_jobs(connect_group(ctx, server, token).call("GET", "/admin/jobs")["jobs"])


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
    client = connect_group(ctx, server, token)
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
    client = connect_group(ctx, server, token)
    job = client.call("GET", f"/admin/jobs/{quote(job_id, safe='')}")
    finish(watch(client, job) if watch_it else job)


def _job_action(action: str) -> Callable[..., None]:
    @handled
    def command(
        ctx: typer.Context, job_id: str, server: LocalServerOpt = None, token: TokenOpt = None
    ) -> None:
        job = connect_group(ctx, server, token).call("POST", f"/admin/jobs/{quote(job_id, safe='')}/{action}")
        console.print(Text(f"job {job_id}: {action} requested; now {job['state']}"))

    command.__doc__ = {
        "pause": "Pause a job (it stops between batches).",
        "resume": "Resume a paused job, or one a server stop or crash interrupted.",
        "cancel": "Cancel a job (the active table is unchanged).",
    }[action]
    return command


for _action in ("pause", "resume", "cancel"):
    jobs_app.command(_action)(_job_action(_action))
