"""`fathom projects add|track|untrack|sync`: projects from git remotes, branch by branch.

`fathom projects` alone still lists the indexed projects. These commands run in this process on
the data dir (as `fathom index` does), or with `--server URL` through that `fathom server`'s
admin API (`/admin/projects/git` and its siblings; the admin token from FATHOM_ADMIN_TOKEN
only), which is where a team server's projects live. The webhook secret is printed once, by
`add`, and never again.

It refuses to run git or to index by itself (`fathom.service.git_projects` does both).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from fathom.index.walking.reasons import TOO_LARGE

if TYPE_CHECKING:
    from fathom.service import Fathom

projects_app = typer.Typer(
    help="List indexed projects, or add and refresh projects from git.",
    invoke_without_command=True,
    no_args_is_help=False,
)
_cli: dict[str, Any] = {}


def register(
    app: typer.Typer,
    listing: Callable[..., None],
    *,
    out: Console,
    err: Console,
    service: Callable[[typer.Context], Fathom],
    runner: Callable[[Any], Any],
) -> None:
    """Attach `projects` (the listing when no subcommand is given, and the git commands)."""
    _cli.update(out=out, err=err, service=service, run=runner)
    projects_app.callback(invoke_without_command=True)(listing)
    app.add_typer(projects_app, name="projects")


ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server",
        envvar="FATHOM_SERVER",
        show_default=False,
        help="A running `fathom server` to do it on, through its admin API: the admin token is read "
        "from FATHOM_ADMIN_TOKEN, never from the command line (default: this data dir, "
        "in-process).",
    ),
]


def _do(
    ctx: typer.Context,
    server: str | None,
    doing: str,
    method: str,
    path: str,
    body: Any,
    here: Callable[[Any], Coroutine[Any, Any, Any]],
) -> Any:
    """The answer of `here(fathom.git)` in this process, or of the same admin API call on the
    `fathom server` at `server`."""
    if server is None:
        return _cli["run"](here(_cli["service"](ctx).git))
    from fathom.cli.local import AdminSession

    with AdminSession(server, doing) as admin:
        return admin.call(method, path, body)


def _at(project: str, *rest: str) -> str:
    return "/".join(["/admin/projects", quote(project, safe=""), *(quote(r, safe="") for r in rest)])


def _branches(report: dict[str, Any], title: str) -> Table:
    table = Table(title=title)
    for col in ("branch", "commit", "files", "chunks", "embedded", "reused by content"):
        table.add_column(col, no_wrap=col != "branch", overflow="fold")
    for branch, r in report.items():
        if r.get("deleted"):
            table.add_row(branch, "-", "-", "-", "0", "deleted on the remote: its index was dropped")
            continue
        if r.get("unchanged"):
            table.add_row(branch, r["commit"][:12], "-", "-", "0", "unchanged")
            continue
        table.add_row(
            branch,
            r["commit"][:12],
            str(r.get("files", "-")),
            str(r.get("chunks", "-")),
            str(r.get("embedded", 0)),
            str(r.get("carried", 0)),
        )
    return table


def _print_branches(report: dict[str, Any], title: str) -> None:
    """The branches' table, then the files each left unwritten as too large, by name."""
    _cli["out"].print(_branches(report, title))
    for branch, r in report.items():
        if r.get("too_large"):
            count = (r.get("skipped") or {}).get(TOO_LARGE, len(r["too_large"]))
            _cli["err"].print(
                Text(
                    f"{branch}: {count} file(s) larger than FATHOM_GIT_MAX_FILE_BYTES "
                    f"not written out nor indexed: {', '.join(r['too_large'][:10])}"
                    + (" …" if count > 10 else ""),
                    style="yellow",
                )
            )


@projects_app.command("add")
def add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The project's name.")],
    git: Annotated[
        str,
        typer.Option(
            "--git",
            help="The remote URL (no credentials in it; the "
            "server's FATHOM_GIT_TOKEN or "
            "FATHOM_GIT_SSH_KEY_FILE are used).",
        ),
    ],
    branch: Annotated[
        list[str] | None,
        typer.Option(
            "--branch",
            "-b",
            help="A branch to index; repeat for more. The first is the default "
            "(default: the remote's default branch).",
        ),
    ] = None,
    poll: Annotated[
        float | None,
        typer.Option(
            "--poll",
            help="Seconds between polls of the remote by a running server (default: "
            "none; webhooks and `fathom projects sync` refresh it).",
        ),
    ] = None,
    server: ServerOpt = None,
) -> None:
    """Clone a git remote into the data dir (or the server's) and index its branches."""
    out, err = _cli["out"], _cli["err"]
    err.print(Text(f"cloning and indexing {name}…", style="dim"))
    added = _do(
        ctx,
        server,
        "adding a git project",
        "POST",
        "/admin/projects/git",
        {"name": name, "url": git, "branches": branch or [], "poll_s": poll},
        lambda g: g.add(name, git, branch or [], poll_s=poll),
    )
    _print_branches(added["reports"], f"{name} from {added['url']}")
    out.print(f"default branch: {added['default']}")
    out.print(
        Text("webhook: ", style="bold") + Text(f"POST {added['webhook']} (content type application/json)")
    )
    out.print(
        Text(
            "webhook secret (shown this once; give it to the forge's webhook settings): ", style="bold yellow"
        )
        + Text(added["webhook_secret"])
    )


@projects_app.command("track")
def track(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The git project.")],
    branch: Annotated[str, typer.Argument(help="The branch to index as well.")],
    server: ServerOpt = None,
) -> None:
    """Index one more branch (only what differs from the default branch is stored)."""
    report = _do(
        ctx,
        server,
        "tracking a branch",
        "POST",
        _at(name, "branches"),
        {"branch": branch},
        lambda g: g.track(name, branch),
    )
    _print_branches({branch: report}, f"{name}: {branch} tracked")


@projects_app.command("untrack")
def untrack(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The git project.")],
    branch: Annotated[str, typer.Argument(help="The branch to stop indexing.")],
    server: ServerOpt = None,
) -> None:
    """Stop indexing a branch: its index and files are dropped."""
    _do(
        ctx,
        server,
        "untracking a branch",
        "DELETE",
        _at(name, "branches", branch),
        None,
        lambda g: g.untrack(name, branch),
    )
    _cli["out"].print(f"{name}: {branch} untracked; its index was dropped")


@projects_app.command("sync")
def sync(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The git project.")],
    server: ServerOpt = None,
) -> None:
    """Fetch, and re-index what changed on every tracked branch (by the diff of its commits)."""
    result = _do(
        ctx, server, "syncing a git project", "POST", _at(name, "sync"), None, lambda g: g.sync(name)
    )
    _print_branches(result["branches"], f"{name}: synced")
