"""The `fathom` command line (typer + rich).

What it owns: parsing, presentation (progress bars with rate and ETA that say what start-up
is doing, result tables, a summary that names skipped files by reason and skipped folders by
name, a line per live sync under `fathom watch`) and the error contract: a `FathomError` is shown
as one line, `error: <what went wrong and the fix>`, with exit code 2 for bad input or
configuration (`ConfigError`) and 1 for everything else Fathom refuses. No traceback reaches
a user for an anticipated failure.

Subcommand groups are separate `typer.Typer` apps attached with `app.add_typer(...)` (later:
`sidecar`, `policy`, `key`, `fleet`, `gate`, `budget`, `jobs`); they inherit the error
contract and the global `--data-dir` option from here, via `settings_of(ctx)` /
`fathom_of(ctx)`.

What it refuses to do: any indexing or search logic (that is `fathom.service.Fathom`), and
printing anything but MCP frames on stdout under `fathom mcp`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from fathom.cli.output import console, err_console, show_error
from fathom.datadir import private_umask
from fathom.errors import ConfigError, FathomError, failure_of

if TYPE_CHECKING:
    from types import SimpleNamespace

    # typer vendors click: the contexts its commands get are `typer._click`'s, not the
    # `click` package's.
    from typer._click import Context as ClickContext

    from fathom.cli.local import Target
    from fathom.config import Settings
    from fathom.index.job import IndexProgress, IndexReport
    from fathom.index.request import SearchRequest
    from fathom.index.results import Noted, SearchHit
    from fathom.service import Fathom

_T = TypeVar("_T")


def _no_type_after_flags() -> None:
    """typer shows a type (`<bool>`) after every option in --help; for a switch that takes no
    value it is noise, so flags show none."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: ClickContext) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_no_type_after_flags()


def exit_code(exc: FathomError) -> int:
    """2 for a refusal of what was asked (fix the input), 1 for a failure. Through a server's
    admin API, its 400 or 413 is that refusal (a `ConfigError` there, as in-process)."""
    from fathom.cli.admin import AdminError

    if isinstance(exc, AdminError):
        return 2 if exc.status in (400, 413) else 1
    return 2 if isinstance(exc, ConfigError) else 1


class FathomGroup(TyperGroup):
    """Every subcommand, including those of sub-apps, runs inside this `invoke`: the one place
    where a typed refusal becomes a one-line message and an exit code. It also gives every
    command the global options, so they are taken after the command as well as before it."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        from fathom.cli.options import accept_global_options

        accept_global_options(self)

    def invoke(self, ctx: ClickContext) -> Any:
        try:
            return super().invoke(ctx)
        except FathomError as exc:
            show_error(exc)
            raise typer.Exit(exit_code(exc)) from None
        except Exception as exc:
            # A full disk, a database gone mid-run: anticipated, so one line, not a traceback.
            failure = failure_of(exc)
            if failure is None:
                raise
            show_error(failure)
            raise typer.Exit(exit_code(failure)) from None
        except KeyboardInterrupt:
            err_console.print(
                Text(
                    "interrupted: the active index is unchanged; run the same command again to resume",
                    style="yellow",
                )
            )
            raise typer.Exit(130) from None


app = typer.Typer(
    cls=FathomGroup,
    name="fathom",
    help="Fathom: self-hosted semantic code search for MCP clients.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def show_version(value: bool) -> None:
    """`fathom --version`: eager, so it answers before any other option is checked."""
    if value:
        from fathom import __version__

        console.print(f"fathom {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            envvar="FATHOM_DATA_DIR",
            help="Where indexes and state live (default ~/.fathom); also taken after the command.",
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", callback=show_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    # Before any command writes: the data dir and all under it are this user's alone (0700/0600).
    private_umask()
    # Merged, not replaced: a caller (a test, an embedding program) may pass obj={"fathom": ...}.
    # `--data-dir` after the command (`fathom.cli.options`) overrides this one.
    ctx.obj = (ctx.obj or {}) | {"data_dir": data_dir}


def settings_of(ctx: typer.Context) -> Settings:
    """The process settings, with the global options applied (for sub-apps too)."""
    from fathom.config import Settings

    root = ctx.find_root()
    obj = root.obj or {}
    cached: Settings | None = obj.get("settings")  # only ever set here
    if cached is None:
        overrides = {"data_dir": obj["data_dir"]} if obj.get("data_dir") else {}
        cached = Settings(**overrides)
        obj["settings"] = cached
        root.obj = obj
    return cached


def fathom_of(ctx: typer.Context) -> Fathom:
    """The composition root for this invocation (one per process)."""
    from fathom.service import Fathom

    root = ctx.find_root()
    obj = root.obj or {}
    if obj.get("fathom") is None:
        obj["fathom"] = Fathom(settings_of(ctx))
        root.obj = obj
    fathom: Fathom = obj["fathom"]  # set just above, or by a caller embedding the CLI
    return fathom


def run(coro: Coroutine[Any, Any, _T]) -> _T:
    return asyncio.run(coro)


# ---------------------------------------------------------------- index


def _progress_bar() -> Progress:
    return Progress(
        TextColumn("[bold blue]{task.fields[phase]:<13}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("chunks"),
        TextColumn("{task.fields[rate]:>6.1f}/s"),
        TextColumn("ETA {task.fields[eta]}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=False,
    )


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    m, s = divmod(int(seconds + 0.5), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


async def index_with_progress(
    fathom: Fathom, path: Path, project: str | None, full: bool, include: list[str] | None = None
) -> IndexReport:
    """Index with a rich progress bar on stderr; returns the report. Start-up shows as what
    it is (opening the store, loading the model, checking the encoders), and the elapsed
    time counts it."""
    with _progress_bar() as bar:
        task = bar.add_task("index", total=None, phase="starting", rate=0.0, eta="--:--")

        def on_progress(p: IndexProgress) -> None:
            bar.update(
                task,
                total=p.chunks_total or None,
                completed=p.chunks_done,
                phase=p.phase,
                rate=p.rate,
                eta=_eta(p.eta_s),
            )

        return await fathom.index(path, project, full=full, progress=on_progress, include=include)


def skipped_folders_line(skipped_dirs: dict[str, list[str]], limit: int = 8) -> str:
    """`node_modules/, vendor/ (built-in skip); dist/ (gitignored)`: folders named, not counted."""
    labels = {
        "ignored-dir": "built-in skip",
        "gitignored": "gitignored",
        "fathomignored": ".fathomignore",
        "excluded": "excluded",
    }
    parts = []
    for reason, folders in sorted(skipped_dirs.items()):
        shown = ", ".join(f"{f}/" for f in folders[:limit])
        more = f" and {len(folders) - limit} more" if len(folders) > limit else ""
        parts.append(f"{shown}{more} ({labels.get(reason, reason)})")
    return "; ".join(parts)


def skipped_files(skipped: dict[str, int], skipped_dirs: dict[str, list[str]]) -> dict[str, int]:
    """The walker's skip counts less the folders it skipped whole (those are named on their own
    line, not counted as files)."""
    out = {reason: n - len(skipped_dirs.get(reason, ())) for reason, n in skipped.items()}
    return {reason: n for reason, n in out.items() if n > 0}


def _first_paths(paths: list[str], limit: int = 8) -> str:
    return ", ".join(paths[:limit]) + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def print_report(report: IndexReport) -> None:
    table = Table(title=f"indexed {report.project}", show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("root", report.root)
    table.add_row(
        "mode",
        (
            "full (first index)"
            if getattr(report, "first", False)
            else "full"
            if report.full
            else "incremental"
        )
        + (" (resumed)" if report.resumed else ""),
    )
    table.add_row("files", str(report.files))
    table.add_row(
        "chunks",
        f"{report.chunks} (code {report.tables.get('code', 0)}, docs {report.tables.get('docs', 0)})",
    )
    table.add_row(
        "embedded",
        f"{report.embedded} in {report.embed_s:.1f}s"
        + (f" ({report.rate:.1f} chunks/s)" if report.embedded else "")
        + (" (only chunks whose text is new)" if not report.full or report.carried else ""),
    )
    if report.carried:
        table.add_row(
            "reused", f"{report.carried} vectors of unchanged text at new lines or paths (not embedded)"
        )
    if getattr(report, "max_tokens", None):
        table.add_row("split", f"{report.split} chunks cut to fit the encoder's {report.max_tokens} tokens")
    table.add_row("unchanged", str(report.reused))
    table.add_row("deleted", str(report.deleted))
    skipped_dirs = getattr(report, "skipped_dirs", {}) or {}
    files = skipped_files(report.skipped, skipped_dirs)
    detail = ", ".join(f"{reason} {n}" for reason, n in sorted(files.items(), key=lambda kv: -kv[1]))
    table.add_row("skipped files", f"{sum(files.values())}" + (f" ({detail})" if detail else ""))
    folders = skipped_folders_line(skipped_dirs)
    if folders:
        table.add_row("skipped folders", folders)
    secrets = getattr(report, "secrets", None)
    if secrets:
        table.add_row(
            "secrets",
            f"{_first_paths(secrets)} (left out: credential files by name; "
            f"take one back with a `!path` line in .fathomignore)",
        )
    redacted = getattr(report, "redacted", None)
    if redacted:
        table.add_row(
            "redacted",
            f"{len(redacted)} files had secrets redacted "
            f"({_first_paths(redacted)}): their code is indexed, each "
            f"value reads [REDACTED:<rule>]",
        )
    notes = getattr(report, "notes", None)
    if notes:
        table.add_row("kept, noted", ", ".join(f"{kind} {n}" for kind, n in sorted(notes.items())))
    table.add_row("elapsed", f"{report.elapsed_s:.1f}s (start-up included)")
    console.print(table)


@app.command()
def index(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="The project folder to index.")],
    project: Annotated[
        str | None, typer.Option("--project", "-p", help="Project name (default: the folder's name).")
    ] = None,
    full: Annotated[
        bool,
        typer.Option("--full", help="Rebuild the whole index in a shadow table and swap it in atomically."),
    ] = False,
    include: Annotated[
        list[str] | None,
        typer.Option(
            "--include",
            metavar="GLOB",
            help="Index what the built-in skips (build/, vendor/, node_modules/...) or .gitignore "
            "leave out, e.g. --include 'vendor/mylib/' (repeatable; remembered for the "
            "project's later runs and syncs).",
        ),
    ] = None,
    no_include: Annotated[
        bool, typer.Option("--no-include", help="Forget the project's --include globs.")
    ] = False,
) -> None:
    """Index a project folder: code along syntax, docs along headings.

    Vectors are keyed by content: a re-index embeds only chunks whose text is new."""
    if include and no_include:
        raise ConfigError("--include and --no-include contradict each other: give one")
    fathom = fathom_of(ctx)
    report = run(index_with_progress(fathom, path, project, full, [] if no_include else include or None))
    print_report(report)


# ---------------------------------------------------------------- search


def print_hits(hits: Sequence[SearchHit | SimpleNamespace], title: str) -> None:
    if not hits:
        console.print(f"no results for {title}")
        return
    rows: list[list[str]] = []
    for h in hits:
        first = next((ln.strip() for ln in h.snippet.splitlines() if ln.strip()), "")
        # The project and the path apart, as the MCP tools give and take them: a location
        # copied from here is one `find_similar` accepts (its path, and a line in it). A
        # result per file names the file's other matching ranges in a column of their own.
        ranges = ", ".join(f"{o[0]}-{o[1]}" for o in getattr(h, "others", ()) or ())
        rows.append(
            [
                f"{h.score:.4f}",
                h.project or "",
                f"{h.path}:{h.start_line}-{h.end_line}",
                h.symbol or "",
                ranges,
                first,
            ]
        )
    # The project and location are what a reader acts on: they never wrap; the snippet gives
    # way first.
    proj = min(32, max(7, *(len(r[1]) for r in rows)))
    loc = min(70, max(len(r[2]) for r in rows))
    sym = min(32, max(6, *(len(r[3]) for r in rows)))
    also = min(24, max(len(r[4]) for r in rows))
    if not also:  # a result per chunk, or files with one range each: no empty column
        rows = [r[:4] + r[5:] for r in rows]
    snippet = max(
        12, console.width - proj - loc - sym - (also + 3 if also else 0) - 6 - 16
    )  # 16: borders, padding
    table = Table(title=title, show_lines=False)
    table.add_column("score", justify="right", no_wrap=True, min_width=6)
    table.add_column("project", no_wrap=True, min_width=proj)
    table.add_column("location", no_wrap=True, min_width=loc)
    table.add_column("symbol", overflow="ellipsis", no_wrap=True, max_width=sym)
    if also:
        table.add_column("also", overflow="ellipsis", no_wrap=True, max_width=also)
    table.add_column("snippet", overflow="ellipsis", no_wrap=True, max_width=snippet)
    for row in rows:
        table.add_row(*(Text(c) for c in row))
    console.print(table)


ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server",
        envvar="FATHOM_SERVER",
        show_default=False,
        help="A running fathom serve/server to ask (default: the one this data dir's own serve or "
        "server runs, if any; else in-process).",
    ),
]


def served(ctx: typer.Context, server: str | None) -> Target | None:
    """The server to ask for this read, or None: answer in-process (`fathom.cli.local`)."""
    from fathom.cli.local import target_of

    return target_of(settings_of(ctx).data_dir, server)


def say(text: str) -> None:
    err_console.print(Text(text, style="dim"))


@app.command()
def search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="What to look for, in words or identifiers.")],
    project: Annotated[
        str | None,
        typer.Option("--project", "-p", help="Only this project (default: every indexed project)."),
    ] = None,
    docs: Annotated[bool, typer.Option("--docs", help="Search the docs table.")] = False,
    k: Annotated[int, typer.Option("-k", help="Number of results (1-100).")] = 10,
    language: Annotated[
        str | None,
        typer.Option("--language", help="Only chunks in this language (python, go, markdown, ...)."),
    ] = None,
    path_glob: Annotated[
        str | None, typer.Option("--path", help="Only files matching this glob (`src/**`, `*.py`).")
    ] = None,
    kind: Annotated[
        str | None, typer.Option("--kind", help="Only chunks defining a function, method or class.")
    ] = None,
    server: ServerOption = None,
    ref: Annotated[
        str | None,
        typer.Option("--ref", help="A branch, tag or commit of a project from git (with --project)."),
    ] = None,
    group: Annotated[
        str,
        typer.Option(
            "--group",
            help="`file`: one result per file, the other ranges of it that matched in "
            "the `also` column; `chunk`: one result per chunk.",
        ),
    ] = "file",
) -> None:
    """Search indexed code (or docs) by meaning and keywords.

    Answered by a running `fathom serve`/`server` of this data dir when there is one (its
    encoder is loaded already), else in-process. The score is the fused rank score of the
    vector and keyword rankings."""
    from fathom.cli.local import call, hits_of
    from fathom.index.request import SearchRequest

    # Checked whole before a server is asked or a model loaded.
    request = SearchRequest.of(
        query,
        project,
        "docs" if docs else "code",
        k,
        language=language,
        path=path_glob,
        kind=kind,
        group=group,
        ref=ref,
    )
    title = f"{request.table}: {query}" + (f" @ {ref}" if ref else "")
    filters = request.where.describe() if request.where else ""
    target = served(ctx, server)
    data = None
    if target is not None:
        data = call(
            target,
            "POST",
            "/local/search",
            {
                "query": query,
                "project": project,
                "table": request.table,
                "k": k,
                "language": language,
                "path": path_glob,
                "kind": kind,
                "group": group,
                "ref": ref,
            },
            say=say,
        )
    if target is not None and data is not None:  # data comes only from a target
        hits, notes = hits_of(data), data.get("notes") or []
        say(f"answered by the fathom {target.kind} at {target.url}")
    else:
        hits = run(search_in_process(fathom_of(ctx), request))
        notes = getattr(hits, "notes", ())
    if ref and hits and hits[0].commit:
        title += f" (commit {hits[0].commit[:12]})"
    print_hits(hits, title + (f" ({filters})" if filters else ""))
    for note in notes:
        err_console.print(Text("note: ", style="yellow") + Text(note))


async def search_in_process(fathom: Fathom, request: SearchRequest) -> Noted:
    """The search in this process; loading the encoder, when it takes over a second, says so."""
    from fathom.service.warmup import needs_loading

    project, table = request.project, request.table
    try:
        fathom.searchable(project, table)  # an unknown project is said before any load
        uses_local = fathom.encoder_for(table, project) is fathom.encoder
    except FathomError:
        uses_local = False  # the search itself says what is wrong
    if uses_local and needs_loading(fathom.encoder):
        await fathom.warm_up().wait(
            lambda _: say(
                f"loading the encoder {fathom.encoder.id} (a running `fathom serve` keeps it loaded)…"
            ),
            grace_s=1.0,
        )
    return await fathom.searches.hits(request)


def projects(ctx: typer.Context, server: ServerOption = None) -> None:
    """List indexed projects (from a running `fathom serve`/`server` of this data dir when there
    is one), or add and refresh projects from git (`fathom projects add NAME --git URL`)."""
    from fathom.cli.local import call, projects_of

    if ctx.invoked_subcommand is not None:
        return

    target = served(ctx, server)
    data = call(target, "GET", "/local/projects", say=say) if target is not None else None
    items = projects_of(data) if data is not None else fathom_of(ctx).projects()
    if not items:
        console.print("no projects indexed yet: run `fathom index PATH`")
        return
    table = Table(title="projects")
    table.add_column("name", overflow="fold")  # a long name wraps, never cut
    for col in ("code chunks", "docs chunks", "last indexed"):
        table.add_column(col, no_wrap=True)
    table.add_column("root", overflow="fold")
    for p in items:
        if p.damaged:
            table.add_row(Text(p.name + " (damaged)", style="red"), "-", "-", "-", p.root or "-")
            continue
        # A shadow table outlives a cancelled full run (the next one resumes it): say that,
        # rather than "indexing", which reads as a job running now. A running job (one the
        # server reports) is said with its progress.
        progress = getattr(p, "progress", None)
        note = f" (indexing: {progress})" if progress else " (unfinished full run)" if p.indexing else ""
        table.add_row(
            Text(p.name + note),
            str(p.tables.get("code", 0)),
            str(p.tables.get("docs", 0)),
            Text(p.last_indexed or "-"),
            Text(p.root or "-"),
        )
    console.print(table)
    for p in items:
        if p.damaged:
            err_console.print(
                Text("damaged: ", style="bold red")
                + Text(
                    f"{p.name}: {p.damaged}. Run `fathom store verify {p.name} "
                    f"--repair`; searches skip it meanwhile."
                )
            )


# ---------------------------------------------------------------- live sync and managing


def print_sync(project: str, report: IndexReport | None, error: BaseException | None) -> None:
    """One line per live sync: what changed in the index, or why it will be retried."""
    from datetime import datetime

    stamp = datetime.now().strftime("%H:%M:%S")
    if error is not None:
        err_console.print(
            Text(f"{stamp} {project}: sync failed, will retry: ", style="yellow")
            + Text(" ".join((str(error) or type(error).__name__).split()))
        )
        return
    assert report is not None  # the watcher passes a report or an error (`OnSync`)
    changes = [f"{report.embedded} embedded"]
    if report.carried:
        changes.append(f"{report.carried} moved (vectors reused)")
    if report.deleted:
        changes.append(f"{report.deleted} removed")
    quiet = not (report.embedded or report.carried or report.deleted)
    console.print(
        f"{stamp} {project}: "
        + ("up to date" if quiet else ", ".join(changes))
        + f" in {report.elapsed_s:.2f}s ({report.chunks} chunks)"
    )


@app.command()
def watch(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="The project folder to keep indexed.")],
    project: Annotated[
        str | None, typer.Option("--project", "-p", help="Project name (default: the folder's name).")
    ] = None,
) -> None:
    """Index a folder, then keep its index current as its files change (Ctrl-C stops).

    Prints a line per sync. A burst of changes (a checkout, a formatter) is one sync."""
    from fathom.index.watch import Watcher

    fathom = fathom_of(ctx)
    root = path.expanduser()
    name = project or root.resolve().name

    from fathom.stopping import Stopped, run_stoppable

    watching = False

    async def main() -> None:
        nonlocal watching
        try:
            report = await index_with_progress(fathom, root, name, False)
            print_report(report)
            fathom.watcher = Watcher(fathom, on_sync=print_sync)
            fathom.watcher.ensure(name, root.resolve(), force=True)
            watching = True
            err_console.print(f"watching {root.resolve()} as {name}: Ctrl-C stops")
            await asyncio.Event().wait()
        finally:
            await fathom.aclose()

    try:
        run_stoppable(main(), grace_s=settings_of(ctx).stop_grace_s)
    except Stopped:  # the way to stop it: not an interruption of anything, once it watches
        if not watching:
            raise KeyboardInterrupt from None  # the first index was cut short: said as for `index`
        err_console.print(f"stopped watching {name}; its index is current as of the last sync")


@app.command()
def watching(
    ctx: typer.Context,
    project: Annotated[str, typer.Argument(help="The project.")],
    on: Annotated[
        bool | None,
        typer.Option("--on/--off", help="Turn live sync of the project on or off (default: show it)."),
    ] = None,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            envvar="FATHOM_SERVER",
            show_default=False,
            help="A running `fathom server` whose project it is, through its admin API: its watcher "
            "follows at once. The admin token is read from FATHOM_ADMIN_TOKEN, never from the "
            "command line (default: this data dir, in-process).",
        ),
    ] = None,
) -> None:
    """Show, or set, whether a project's index follows its files (live sync).

    The per-project setting that `fathom mcp`, `serve` and `server` read when they start; with
    --server, the running server's watcher starts or stops at once."""
    if server is not None:
        from fathom.cli.local import watch_through

        state = watch_through(server, project, on)
    else:
        fathom = fathom_of(ctx)
        state = run(fathom.set_watch(project, on)) if on is not None else fathom.watch_state(project)
    console.print(
        f"{project}: live sync {'on' if state['enabled'] else 'off'}"
        + (f" ({state['state']})" if state["enabled"] else "")
    )


@app.command()
def drop(
    ctx: typer.Context,
    project: Annotated[str, typer.Argument(help="The project to remove from the index.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            envvar="FATHOM_SERVER",
            show_default=False,
            help="A running `fathom server` to drop it from, through its admin API: the admin token is "
            "read from FATHOM_ADMIN_TOKEN, never from the command line (default: this data dir, "
            "in-process).",
        ),
    ] = None,
) -> None:
    """Remove a project and everything of it from the index (asks first unless --yes).

    Both tables, its record, its jobs and its live sync go. Its folder is not touched;
    `fathom index` brings it back."""

    def confirm() -> None:
        if not yes:  # without an answer (no terminal, end of input) nothing is dropped
            typer.confirm(f"Remove project {project!r} and all of its index?", abort=True, err=True)

    if server is not None:
        from fathom.cli.local import drop_through

        result = drop_through(server, project, confirm)
        rows = ", ".join(f"{t} {n}" for t, n in result["rows"].items()) or "no rows"
        console.print(f"dropped {project} on the fathom server at {server.rstrip('/')} ({rows})")
        return
    fathom = fathom_of(ctx)
    if not fathom.store.has_project(project) and fathom.records.get(project) is None:
        from fathom.index.store import UnknownProject

        raise UnknownProject(project, [p.name for p in fathom.store.list_projects()])
    fathom.git.refuse_branch_drop(project)  # before the question: the answer would not matter
    confirm()
    result = run(fathom.drop(project))
    rows = ", ".join(f"{t} {n}" for t, n in result["rows"].items()) or "no rows"
    console.print(f"dropped {project} ({rows})")
