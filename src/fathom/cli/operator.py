"""The operator's command groups against a running fathom server, attached to an app: `policy`,
`key`, `fleet`, `gate`, `jobs`, `tokens`, `budget` and `audit-log`, one module each, sharing
`admin`'s client.

What it owns: which of them is attached, under which name, in `fathom --help`'s order. It holds
no command of its own; `fathom.cli.commands` calls `register` for the full app, and the tests
for an app with the operator's commands only.
"""

from __future__ import annotations

import typer

from fathom.cli import audit, budget, fleet, gate, jobs, key, policy, tokens


def register(app: typer.Typer) -> None:
    """Attach the operator commands to the `fathom` app."""
    app.add_typer(policy.policy_app, name="policy")
    app.add_typer(key.key_app, name="key")
    app.add_typer(fleet.fleet_app, name="fleet")
    app.add_typer(gate.gate_app, name="gate")
    app.add_typer(jobs.jobs_app, name="jobs")
    app.add_typer(tokens.tokens_app, name="tokens")
    app.command("budget")(budget.budget)
    app.command("audit-log")(audit.audit_log)
