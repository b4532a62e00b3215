"""`fathom ask` and `fathom explore`: the two LLM roles on the command line.

What it owns: the two commands' options and their presentation (the answer, its citations,
the refused citations, and for explore the trace as a table and the limit that stopped it).
They run inside the CLI's error contract (`fathom.cli.FathomGroup`): a refusal such as "rlm is
local-only and no local LLM can serve it" is one line and an exit code, never a traceback.
Routing is the standalone router's (`routes.standalone_router`): the routing state in the data
dir over the providers this process has.

API:
    register(app) -> None     (attaches the two commands to the `fathom` typer app)
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text


def register(app: typer.Typer) -> None:
    @app.command()
    def ask(
        ctx: typer.Context,
        question: Annotated[str, typer.Argument(help="A question about the indexed code.")],
        project: Annotated[str | None, typer.Option("--project", "-p")] = None,
    ) -> None:
        """Answer a question from retrieved code and docs, citing path:line ranges."""
        from fathom.agents.assistant import CodeAssistant
        from fathom.agents.routes import standalone_router
        from fathom.cli import console, fathom_of, run

        fathom = fathom_of(ctx)
        router = standalone_router(fathom)
        answer = run(CodeAssistant(fathom, router, reranker=router).ask(question, project))
        console.print(Text(answer.answer))
        if answer.citations:
            console.print(Text("citations: " + ", ".join(str(c) for c in answer.citations),
                               style="cyan"))
        for r in answer.rejected:
            console.print(Text(f"not from the retrieved context: {r}", style="yellow"))

    @app.command()
    def explore(
        ctx: typer.Context,
        question: Annotated[str, typer.Argument(help="A hard question about one project.")],
        project: Annotated[str, typer.Option("--project", "-p", help="The indexed project.")],
        max_steps: Annotated[int, typer.Option(help="Tool calls allowed at the top level.")] = 12,
        max_depth: Annotated[int, typer.Option(help="Levels of sub-questions allowed.")] = 2,
        trace: Annotated[bool, typer.Option(help="Show every step.")] = True,
    ) -> None:
        """Explore a project step by step with read-only tools (rlm role), bounded in depth,
        steps, tokens and time."""
        from fathom.agents.rlm import Explorer, Limits
        from fathom.agents.routes import standalone_router
        from fathom.cli import console, fathom_of, run

        fathom = fathom_of(ctx)
        router = standalone_router(fathom)
        explorer = Explorer.for_project(fathom, router, project, reranker=router,
                                        limits=Limits(max_depth=max_depth, max_steps=max_steps))
        result = run(explorer.explore(question))
        if trace and result.trace:
            table = Table(title="trace")
            for col in ("depth", "step", "tool", "arguments", "result"):
                table.add_column(col, overflow="fold")
            for s in result.trace:
                args = ", ".join(f"{k}={v!r}" for k, v in s.args.items())
                table.add_row(str(s.depth), str(s.step), s.tool, args,
                              Text(s.summary, style="" if s.ok else "yellow"))
            console.print(table)
        console.print(Text(result.answer, style="yellow" if result.stopped else ""))
        if result.citations:
            console.print(Text("citations: " + ", ".join(str(c) for c in result.citations),
                               style="cyan"))
        for u in result.unverified:
            console.print(Text(f"not found in the project: {u}", style="yellow"))
