"""The full `fathom` app: every command group registered on the root app of `core`.

What it owns: the assembly only (which group is attached, with which consoles, settings and
service). `fathom.cli` hands this `app` out on first use, so `fathom mcp`'s fast path
(`fathom.cli.launch`) runs without importing any of it.
"""

from __future__ import annotations

from fathom.agents.commands import register as register_agent_commands
from fathom.cli import calls, evaluation, git, hosts, models, oauth, operator, serve, store
from fathom.cli.core import app, fathom_of, projects, run, settings_of
from fathom.cli.output import console, err_console
from fathom.fleet.command import sidecar
from fathom.server.__main__ import server

__all__ = ["app"]

serve.register(app, out=console, err=err_console, settings=settings_of, service=fathom_of, runner=run)
evaluation.register(app, out=console, err=err_console, settings=settings_of, runner=run)
hosts.register(app, settings=settings_of)  # `fathom connect HOST`
models.register(app, settings=settings_of, service=fathom_of)  # `fathom models`
git.register(app, projects, out=console, err=err_console, service=fathom_of, runner=run)
app.command("server")(server)
app.command("sidecar")(sidecar)
app.add_typer(store.store_app, name="store")
register_agent_commands(app, console=console, fathom_of=fathom_of, run=run)  # `ask`, `explore`
operator.register(app)  # policy, key, fleet, gate, jobs, tokens, budget, audit-log
oauth.register(app)
calls.register(app, console=console, fathom_of=fathom_of)
