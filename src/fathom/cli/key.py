"""`fathom key push`: the OpenRouter key, pushed to every approved, connected sidecar (or only
the routing re-pushed, or the key dropped), and who acknowledged it.

It refuses to take the key from the command line, where the shell history and the process list
would keep it: it reads it from stdin or a hidden prompt, and `--key` is refused with the way
to do it. It never prints the key, and drops it after the call; the server stores none.
"""

from __future__ import annotations

import getpass
import sys
from typing import Annotated, Any

import typer

from fathom.cli.admin import (
    DEFAULT_SERVER,
    AdminError,
    AdminRefused,
    ServerOpt,
    TokenOpt,
    connect,
    handled,
    print_push,
)

key_app = typer.Typer(help="The OpenRouter key: pushed to the sidecars, never stored.", no_args_is_help=True)


def read_key() -> str:
    """From stdin when it is not a terminal (a pipe, a file), else from a hidden prompt."""
    if not sys.stdin.isatty():
        key = sys.stdin.read().strip()
    else:
        key = getpass.getpass("OpenRouter key (input hidden): ").strip()
    if not key:
        raise AdminRefused(
            "no key given: pipe it on stdin (e.g. `fathom key push < keyfile`) or type it at the prompt"
        )
    return key


@key_app.command("push")
@handled
def key_push(
    without_key: Annotated[
        bool, typer.Option("--without-key", help="Re-push the routing only; sidecars keep the key they hold.")
    ] = False,
    forget: Annotated[
        bool, typer.Option("--forget", help="Tell the sidecars to drop the key they hold.")
    ] = False,
    key_arg: Annotated[str | None, typer.Option("--key", hidden=True)] = None,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
) -> None:
    """Push the OpenRouter key (from stdin or a hidden prompt) to every approved, connected sidecar."""
    if key_arg is not None:
        key_arg = None
        raise AdminRefused(
            "refusing a key on the command line: the shell history and the process list would "
            "keep it. Pipe it on stdin (`fathom key push < keyfile`) or type it at the prompt"
        )
    client = connect(server, token)
    body: dict[str, Any] = {"forget_key": True} if forget else {}
    if not without_key and not forget:
        body["key"] = read_key()
    try:
        push = client.call("POST", "/admin/key", body)
    finally:
        body.clear()  # drop our reference to the key
    print_push(push)
    if (push["key_sent"] or forget) and not push["acked"]:
        raise AdminError(
            "no sidecar acknowledged the push, so no sidecar holds the key: approve and connect a "
            "sidecar (`fathom fleet`), then push again"
        )
