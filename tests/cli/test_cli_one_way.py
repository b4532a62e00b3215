"""One way to say each thing at the command line: a location `fathom search` prints is one
`find_similar` takes; the global options work before or after the command.

Real parts: the embedded encoder, a real LanceDB store, the MCP tools through the SDK's own
client, the `fathom` app through typer's runner.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from fathom.config import Settings
from fathom.errors import ConfigError
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom
from tests.cli.cli_fixtures import invoke, rows


def test_a_location_fathom_search_prints_is_one_find_similar_takes(
    tmp_path: Path,
    local_encoder,
    sample_project,
):
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
            similar = await client.call_tool(
                "find_similar", {"project": project, "path": path, "line": int(lines.split("-")[0])}
            )
            searched = await client.call_tool(
                "search_code", {"query": "verify a password against its hash", "k": 3}
            )
        return similar, searched

    similar, searched = asyncio.run(ask())
    assert not similar.is_error, similar.content
    assert (project, path) == ("shop", "auth/password.py")
    assert similar.structured_content["results"], similar.structured_content
    # MCP names the same chunk with the same path, the project beside it.
    assert {
        (r["project"], f"{r['path']}:{r['start_line']}-{r['end_line']}")
        for r in searched.structured_content["results"]
    } >= {(project, location)}


@pytest.mark.parametrize("where", ["before", "after"])
def test_the_data_dir_is_taken_before_or_after_the_command(tmp_path: Path, where: str):
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    # A file only this data dir holds: `projects` lists nothing, but says so in that folder.
    option = ["--data-dir", str(data)]
    args = [*option, "projects"] if where == "before" else ["projects", *option]
    env = {"FATHOM_DATA_DIR": str(tmp_path / "elsewhere")}  # the command line beats the environment
    result = invoke(*args, env=env)
    assert result.exit_code == 0, result.output
    assert "no projects indexed yet" in result.stdout
    assert (data / "lance").exists() and not (tmp_path / "elsewhere").exists()


def test_the_data_dir_after_a_subcommand_of_a_group_and_in_its_help(tmp_path: Path):
    data = tmp_path / "data"
    result = invoke(
        "store", "verify", "--data-dir", str(data), env={"FATHOM_DATA_DIR": str(tmp_path / "other")}
    )
    assert result.exit_code == 0, result.output
    assert "verified 0 project(s)" in result.stdout and data.exists() and not (tmp_path / "other").exists()
    for command in (["search"], ["drop"], ["store", "verify"], ["index"]):
        shown = invoke(*command, "--help")
        assert "--data-dir" in shown.stdout, (command, shown.stdout)


def test_two_different_data_dirs_are_refused_with_both_named(tmp_path: Path):
    first, second = tmp_path / "one", tmp_path / "two"
    result = invoke("--data-dir", str(first), "projects", "--data-dir", str(second))
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    assert str(first) in said and str(second) in said and "Traceback" not in result.output
    same = invoke("--data-dir", str(first), "projects", "--data-dir", str(first))
    assert same.exit_code == 0, same.output


def test_a_token_goes_over_plain_http_only_to_this_machine():
    from fathom.cli.local import server_url

    for ok in (
        "http://127.0.0.1:8766",
        "http://localhost:8765/",
        "http://[::1]:8766",
        "https://fathom.example.net",
    ):
        assert server_url(ok) == ok.rstrip("/")
    for bad in ("http://fathom.example.net:8765", "http://10.0.0.5:8765"):
        with pytest.raises(ConfigError, match="clear text; use the server's https:// address"):
            server_url(bad)
