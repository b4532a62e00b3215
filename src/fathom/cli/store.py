"""`fathom store`: check a store for damage and repair it (`verify`), or move an index from
LanceDB to PostgreSQL (`migrate`). The checks and the copy are the store package's
(`fathom.index.verify`, `fathom.index.migrate`); this module parses, shows progress and tables,
and sets the exit code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from fathom.cli.core import fathom_of, run, settings_of
from fathom.cli.output import console, err_console
from fathom.errors import ConfigError

store_app = typer.Typer(
    help="The index store: verify and repair it, or move it from LanceDB to PostgreSQL.", no_args_is_help=True
)


@store_app.command("verify")
def store_verify(
    ctx: typer.Context,
    project: Annotated[
        str | None, typer.Argument(help="The project to check (default: every project).")
    ] = None,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Fix what can be fixed: rebuild indexes and state, drop duplicate and "
            "damaged rows, delete the rows of files that hold credentials, "
            "re-embed damaged vectors under the gate.",
        ),
    ] = False,
) -> None:
    """Check stored tables for damage: duplicate ids, bad vectors, damaged rows, a missing
    full-text index, row counts that disagree with the manifest, rows of files that hold
    credentials (named by path, never quoted). Exit 1 while any remains."""
    fathom = fathom_of(ctx)
    checks = run(fathom.verify_store(project, repair=repair))
    problems = [p for c in checks for p in c.problems]
    rows = sum(sum(c.tables.values()) for c in checks)
    if not problems:
        console.print(f"verified {len(checks)} project(s), {rows} rows: no problems found")
        return
    table = Table(title="store verify" + (" --repair" if repair else ""))
    for col in ("project", "table", "problem", "rows", "detail"):
        table.add_column(col, overflow="fold")
    if repair:
        table.add_column("repaired", overflow="fold")
    for p in problems:
        cells = [p.project, p.table or "-", p.kind, str(len(p.chunk_ids) or "-"), p.detail]
        table.add_row(*cells, *([p.repaired or "not repaired"] if repair else []))
    console.print(table)
    left = [p for p in problems if not p.repaired]
    if left:
        hint = "" if repair else f" Run `fathom store verify {project or ''} --repair`.".replace("  ", " ")
        err_console.print(
            Text("error: ", style="bold red") + Text(f"{len(left)} problem(s) in the store.{hint}")
        )
        raise typer.Exit(1)


@store_app.command("migrate")
def store_migrate(
    ctx: typer.Context,
    to: Annotated[
        str,
        typer.Option(
            "--to",
            envvar="FATHOM_STORE_URL",
            show_default=False,
            help="The PostgreSQL database: postgresql://user:password@host:port/database "
            "(default: FATHOM_STORE_URL, which keeps the password off the command line).",
        ),
    ],
    project: Annotated[
        list[str] | None,
        typer.Option("--project", "-p", help="Only this project (repeatable; default: every project)."),
    ] = None,
    source: Annotated[
        Path | None,
        typer.Option("--from", help="The LanceDB folder to copy from (default: <data dir>/lance)."),
    ] = None,
    gate_state: Annotated[
        bool,
        typer.Option(
            "--gate-state/--no-gate-state",
            help="Also copy the gate's verdicts and golden vectors and the routing state.",
        ),
    ] = True,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1)] = 1000,
) -> None:
    """Copy an index from LanceDB into PostgreSQL + pgvector, provenance preserved.

    Rows keep provider, verdict and write time; a copy is promoted only when its counts match.
    """
    from fathom.index.migrate import migrate, migrate_gate_state
    from fathom.index.pgstore import PostgresStore, is_postgres_url, redact_url
    from fathom.index.store import LanceStore

    settings = settings_of(ctx)
    if not is_postgres_url(to):
        raise ConfigError(f"--to must be a postgresql://… URL, got {redact_url(to)!r}")
    folder = (source or settings.lance_dir).expanduser()
    if not (folder / "projects").is_dir():
        raise ConfigError(
            f"no LanceDB index at {folder}: pass --from FOLDER (the `lance` folder "
            f"under the data dir that `fathom index` wrote)"
        )
    lance = LanceStore(folder)
    target = PostgresStore(to)
    try:
        with Progress(
            TextColumn("[bold blue]{task.description:<20}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("rows"),
            TimeElapsedColumn(),
            console=err_console,
        ) as bar:
            tasks: dict[tuple[str, str], Any] = {}

            def on_progress(name: str, table: str, done: int, total: int) -> None:
                key = (name, table)
                if key not in tasks:
                    tasks[key] = bar.add_task(f"{name}/{table}", total=total or None)
                bar.update(tasks[key], completed=done)

            report = migrate(
                lance, target, projects=project or None, batch_size=batch_size, progress=on_progress
            )
        table = Table(title=f"migrated into {target.url}")
        for col in ("project", "table", "rows", "copied now", "provenance (provider | verdict: rows)"):
            table.add_column(col, overflow="fold")
        for t in report.tables:
            groups = "\n".join(
                f"{p} | {v or '-'}: {n}"
                for (p, v), n in sorted(t.provenance.items(), key=lambda kv: str(kv[0]))
            )
            table.add_row(
                t.project, t.table, str(t.rows), str(t.copied) + (" (resumed)" if t.resumed else ""), groups
            )
        console.print(table)
        if gate_state:
            g = migrate_gate_state(settings.data_dir, target)
            console.print(
                f"gate: {g.verdicts} verdicts, {g.golden} golden vector sets; routing "
                f"state {'copied' if g.routing else 'not found (defaults apply)'}"
            )
        console.print(
            f"done: {report.rows} rows in {len(report.tables)} tables. Serve from it "
            f"with FATHOM_STORE_URL={target.url} (password as before)"
        )
    finally:
        target.close()
        lance.close()
