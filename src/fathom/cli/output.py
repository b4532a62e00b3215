"""Where the command line writes: one console for data on stdout, one for messages on stderr,
and the one-line form of an error. Every command group prints through these two.

Data is printed as it is: no emoji codes (`:cloud:` inside a provider id stays text), no
highlighting; data goes through `Text` (or is escaped), so brackets in it are never read as markup.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

console = Console(emoji=False, highlight=False)
err_console = Console(stderr=True, soft_wrap=True, emoji=False, highlight=False)


def show_error(exc: BaseException) -> None:
    """`error: <what went wrong and the fix>` on stderr, on one line even when the message has
    several."""
    text = str(exc) or type(exc).__name__
    err_console.print(Text("error: ", style="bold red") + Text(" ".join(text.split())))
