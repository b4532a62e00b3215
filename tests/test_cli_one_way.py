"""One way to say each thing at the command line: a location `fathom search` prints is one
`find_similar` takes; the global options work before or after the command.

Real parts: the embedded encoder, a real LanceDB store, the MCP tools through the SDK's own
client, the `fathom` app through typer's runner.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from mcp import Client
from typer.testing import CliRunner

from fathom.cli import app
from fathom.config import Settings
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom
from tests.retrieval_fixtures import local_encoder, sample_project  # noqa: F401

runner = CliRunner()


def invoke(*args: str, fathom: Fathom | None = None, env: dict[str, str] | None = None):
    obj = {"fathom": fathom} if fathom is not None else None
    return runner.invoke(app, list(args), obj=obj, env={"COLUMNS": "160", **(env or {})})


def rows(table: str) -> list[list[str]]:
    """The cells of each row of a rich table as printed, its header first."""
    return [[c.strip() for c in re.split("[│┃]", line)[1:-1]] for line in table.splitlines()
            if line[:1] in "│┃" and len(re.split("[│┃]", line)) > 2]


def test_a_location_fathom_search_prints_is_one_find_similar_takes(tmp_path: Path, local_encoder,  # noqa: F811
                                                                   sample_project):  # noqa: F811
    fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=local_encoder)
    assert invoke("index", str(sample_project), "--project", "shop", fathom=fathom).exit_code == 0
    found = invoke("search", "verify a password against its hash", "-k", "3", fathom=fathom)
    assert found.exit_code == 0, found.output
    header, *body = rows(found.stdout)
    assert header[:3] == ["score", "project", "location"], header
    row = next(r for r in body if r[3] == "verify_password")
    project, location = row[1], row[2]
    # What a reader copies: the path as the project knows it, and the chunk's first line.
    path, lines = location.rsplit(":", 1)

    async def ask() -> tuple[Any, Any]:
        async with Client(build_mcp_server(fathom)) as client:
            similar = await client.call_tool("find_similar", {"project": project, "path": path,
                                                              "line": int(lines.split("-")[0])})
            searched = await client.call_tool("search_code", {"query": "verify a password against its hash",
                                                              "k": 3})
        return similar, searched

    similar, searched = asyncio.run(ask())
    assert not similar.is_error, similar.content
    assert (project, path) == ("shop", "auth/password.py")
    assert similar.structured_content["results"], similar.structured_content
    # MCP names the same chunk with the same path, the project beside it.
    assert {(r["project"], f"{r['path']}:{r['start_line']}-{r['end_line']}")
            for r in searched.structured_content["results"]} >= {(project, location)}
