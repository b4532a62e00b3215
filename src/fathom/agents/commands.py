"""`fathom ask` and `fathom explore`: the two LLM roles on the command line.

What it owns: the two commands' options and their presentation (the answer, its citations,
the refused citations, and for explore each step printed as it happens and the limit that
stopped it). They run inside the CLI's error contract (`fathom.cli.core.FathomGroup`), and the CLI
hands them its console, its `Fathom` of the context and its runner (so this module never
imports the CLI that imports it): a refusal
such as "rlm is local-only and no local LLM can serve it" is one line and an exit code, never a
traceback, and names what to set. Routing is the standalone router's
(`routes.standalone_router`): the routing state in the data dir over this machine's local LLMs
(FATHOM_LOCAL_CHAT_URL and its per-role overrides).

API:
    register(app, *, console, fathom_of, run) -> None   (attaches the two commands to the
                                                          `fathom` typer app)
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

if TYPE_CHECKING:  # pragma: no cover
    from fathom.agents.rlm import TraceStep
    from fathom.inference.router import Router
    from fathom.service import Fathom


async def _closing(router: Router, work: Awaitable[Any]) -> Any:
    """`work`, then the HTTP connections of the router's local LLMs closed."""
    from fathom.agents.routes import close_providers

    try:
        return await work
    finally:
        await close_providers(router)


def show_step(console: Console, step: TraceStep) -> None:
    """One line per step of the loop, printed the moment it ends."""
    args = ", ".join(f"{k}={v!r}" for k, v in step.args.items())
    line = Text(f"{'  ' * step.depth}{step.depth}.{step.step} ", style="dim")
    line.append(f"{step.tool}({args})", style="bold" if step.ok else "yellow")
    line.append(f"  {step.summary}", style="" if step.ok else "yellow")
    console.print(line)


def register(
    app: typer.Typer,
    *,
    console: Console,
    fathom_of: Callable[[typer.Context], Fathom],
    run: Callable[[Coroutine[Any, Any, Any]], Any],
) -> None:
    @app.command()
    def ask(
        ctx: typer.Context,
        question: Annotated[str, typer.Argument(help="A question about the indexed code.")],
        project: Annotated[
            str | None,
            typer.Option("--project", "-p", help="Only this project (default: every indexed project)."),
        ] = None,
    ) -> None:
        """Answer a question from retrieved code and docs, citing path:line ranges."""
        from fathom.agents.assistant import CodeAssistant
        from fathom.agents.routes import standalone_router

        fathom = fathom_of(ctx)
        router = standalone_router(fathom)
        answer = run(_closing(router, CodeAssistant(fathom, router, reranker=router).ask(question, project)))
        console.print(Text(answer.answer))
        if answer.citations:
            console.print(Text("citations: " + ", ".join(str(c) for c in answer.citations), style="cyan"))
        for r in answer.rejected:
            console.print(Text(f"not from the retrieved context: {r}", style="yellow"))

    @app.command()
    def explore(
        ctx: typer.Context,
        question: Annotated[str, typer.Argument(help="A hard question about one project.")],
        project: Annotated[str, typer.Option("--project", "-p", help="The indexed project.")],
        max_steps: Annotated[int, typer.Option(help="Tool calls allowed at the top level.")] = 12,
        max_depth: Annotated[int, typer.Option(help="Levels of sub-questions allowed.")] = 2,
        trace: Annotated[bool, typer.Option(help="Show every step as it happens.")] = True,
    ) -> None:
        """Explore a project step by step with read-only tools (rlm role), bounded in depth,
        steps, tokens and time."""
        from fathom.agents.rlm import Explorer, Limits
        from fathom.agents.routes import standalone_router

        fathom = fathom_of(ctx)
        router = standalone_router(fathom)
        explorer = Explorer.for_project(
            fathom,
            router,
            project,
            reranker=router,
            limits=Limits(max_depth=max_depth, max_steps=max_steps),
            on_step=functools.partial(show_step, console) if trace else None,
        )
        with console.status(f"exploring {project} …"):
            result = run(_closing(router, explorer.explore(question)))
        console.print(Text(result.answer, style="yellow" if result.stopped else ""))
        if result.citations:
            console.print(Text("citations: " + ", ".join(str(c) for c in result.citations), style="cyan"))
        for u in result.unverified:
            console.print(Text(f"not found in the project: {u}", style="yellow"))
