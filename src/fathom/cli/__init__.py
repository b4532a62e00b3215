"""The `fathom` command line (typer + rich), one module per command group:

- `core`: the root app, its error contract and global options, and the everyday commands
  (`index`, `search`, `projects`, `watch`, `drop`);
- `serve`: `fathom mcp` (a host's session) and `fathom serve`; `local`: how the CLI reaches a
  running one; `hosts`: `fathom connect`; `models`: `fathom models`; `git`: `fathom projects add`
  and the other git commands; `calls`: `fathom calls`; `evaluation`: `fathom eval`;
- `store`: `fathom store verify` and `migrate`;
- `admin`: the operator's commands against a running server (policy, key, fleet, gate, jobs,
  tokens); `oauth`: its sign-in; `options`: the options they share; `output`: the two consoles.

The long-running `fathom server` and `fathom sidecar` are defined next to what they run
(`fathom.server.__main__`, `fathom.fleet.command`) and attached here, so `python -m` and `fathom`
spellings never drift apart. This module only assembles: every group registers itself on `app`.
"""

from __future__ import annotations

from fathom.agents.commands import register as register_agent_commands
from fathom.cli import admin, calls, evaluation, git, hosts, models, oauth, serve, store
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
admin.register(app)  # policy, key, fleet, gate, jobs, tokens: against a running server
oauth.register(app)
calls.register(app, console=console, fathom_of=fathom_of)
