"""`fathom calls NAME`: the callers, callees or impact of a definition, from the index, as the
MCP tool `find_calls` answers them (the same service call, the same lines).

What it owns: the command's options and its presentation (a line per call site, or `--json`).
It refuses to resolve anything itself (`fathom.service.calls`) or to reach a server: it reads
the data dir in-process, as `fathom search` does without `--server`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console

    from fathom.service.ports import SymbolSource

# The service and the answer's shape load when the command runs: `import fathom.cli` stays
# light (every `fathom mcp` bridge imports it; tests/test_no_torch.py holds it).
DEFAULT_DEPTH = 2  # fathom.service.calls.DEFAULT_DEPTH (a test checks they agree)


def register(
    app: typer.Typer, *, console: Console, fathom_of: Callable[[typer.Context], SymbolSource]
) -> None:
    @app.command("calls")
    def calls_command(
        ctx: typer.Context,
        name: Annotated[str, typer.Argument(help="The definition: `send` or `Client.send`.")],
        direction: Annotated[
            str, typer.Option("--direction", "-d", help="callers, callees or impact (transitive callers).")
        ] = "callers",
        depth: Annotated[int, typer.Option("--depth", help="impact: how many calls away.")] = DEFAULT_DEPTH,
        project: Annotated[str | None, typer.Option("--project", "-p", help="Only this project.")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the call sites as JSON.")] = False,
    ) -> None:
        """Who calls a definition, what it calls, or what a change to it reaches."""
        from fathom.server.mcp_calls import head_of, site_line, sites_of
        from fathom.service import calls as service

        answer = service.find_calls(fathom_of(ctx), name, direction=direction, project=project, depth=depth)
        found = sites_of(answer)
        if as_json:
            typer.echo(
                json.dumps(
                    {
                        "direction": direction,
                        "notes": answer.notes,
                        "truncated": answer.truncated,
                        "results": [s.model_dump(mode="json") for s in found],
                    }
                )
            )
            return
        console.print(escape(head_of(answer, name, len(found))))
        for site in found:
            console.print(escape(site_line(site)), soft_wrap=True)
        for note in answer.notes:
            console.print(escape(note))
