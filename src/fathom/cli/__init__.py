"""The `fathom` command line (typer + rich), one module per command group:

- `core`: the root app, its error contract and global options, and the everyday commands
  (`index`, `search`, `projects`, `watch`, `drop`);
- `serve`: `fathom mcp` (a host's session) and `fathom serve`; `local`: how the CLI reaches a
  running one; `hosts`: `fathom connect`; `models`: `fathom models`; `git`: `fathom projects add`
  and the other git commands; `calls`: `fathom calls`; `evaluation`: `fathom eval`;
- `store`: `fathom store verify` and `migrate`;
- the operator's commands against a running server, one module per group: `policy`, `key`,
  `fleet`, `gate`, `budget`, `jobs`, `tokens`, `audit` (`fathom audit-log`), attached by
  `operator`, over the admin client they share in `admin`; `oauth`: its sign-in; `options`: the
  options they share; `output`: the two consoles.

The long-running `fathom server` and `fathom sidecar` are defined next to what they run
(`fathom.server.__main__`, `fathom.fleet.command`) and attached here, so `python -m` and `fathom`
spellings never drift apart. The assembly is `commands`; this package hands its `app` out on
first use (`fathom.cli.app`), so that `fathom mcp`'s fast path (`launch.main`, the `fathom`
script's entry and `python -m fathom.cli`'s) imports none of the command groups, typer or rich.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer

__all__ = ["app"]


def __getattr__(name: str) -> typer.Typer:
    """`fathom.cli.app`: the full app, assembled on first use (`fathom.cli.commands`)."""
    if name == "app":
        from fathom.cli.commands import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
