"""The `fathom` app through typer's runner (`invoke`) and the cells of a rich table as printed
(`rows`).
"""

from __future__ import annotations

import re

from typer.testing import CliRunner

from fathom.cli import app
from fathom.service import Fathom

runner = CliRunner()


def invoke(*args: str, fathom: Fathom | None = None, env: dict[str, str] | None = None):
    obj = {"fathom": fathom} if fathom is not None else None
    return runner.invoke(app, list(args), obj=obj, env={"COLUMNS": "160", **(env or {})})


def rows(table: str) -> list[list[str]]:
    """The cells of each row of a rich table as printed, its header first."""
    return [
        [c.strip() for c in re.split("[│┃]", line)[1:-1]]
        for line in table.splitlines()
        if line[:1] in "│┃" and len(re.split("[│┃]", line)) > 2
    ]
