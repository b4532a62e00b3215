"""`fathom connect HOST`: Fathom's entry written into each MCP host's config file, in the shape
that host documents (docs/hosts.md), in a temporary HOME: never the real one.

Each host: a dry run prints the diff and writes nothing; `--write` keeps every other entry and
setting, leaves a backup and parses in the host's format; a second run changes nothing; a file
that does not parse is refused and left as it was. Then the written stdio entry is launched by
a real MCP client session, which lists Fathom's tools.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from typer.testing import CliRunner

from fathom.cli import app
from fathom.hosts import HostConfigUnreadable, Launch, updated_text

runner = CliRunner()
FATHOM = str(Path(sys.executable).parent / "fathom")

# The file each host reads in a HOME, what else it holds, and what breaks it.
FILES = {
    "claude": ".claude.json",
    "cursor": ".cursor/mcp.json",
    "vscode": ".config/Code/User/mcp.json",
    "gemini": ".gemini/settings.json",
    "codex": ".codex/config.toml",
}
OTHER_JSON = {"theme": "dark", "numStartups": 7}
OTHER_SERVER = {"command": "npx", "args": ["-y", "other-server"]}
CODEX_SEED = (
    '# my Codex settings\nmodel = "o3"\n\n# a server of mine\n'
    '[mcp_servers.other]\ncommand = "npx"\nargs = ["-y", "other-server"]\n'
)


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CONFIG_HOME", "CODEX_HOME", "APPDATA", "FATHOM_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    return home


def connect(*args: str):
    return runner.invoke(app, ["connect", *args], env={"COLUMNS": "200"})


def seed(home: Path, host: str) -> Path:
    path = home / FILES[host]
    path.parent.mkdir(parents=True, exist_ok=True)
    if host == "codex":
        path.write_text(CODEX_SEED)
    else:
        key = "servers" if host == "vscode" else "mcpServers"
        path.write_text(json.dumps({**OTHER_JSON, key: {"other": OTHER_SERVER}}, indent=4))
    return path


def parsed(host: str, path: Path) -> dict:
    return tomllib.loads(path.read_text()) if host == "codex" else json.loads(path.read_text())


def servers_of(host: str, config: dict) -> dict:
    return config[{"vscode": "servers", "codex": "mcp_servers"}.get(host, "mcpServers")]


@pytest.mark.parametrize("host", list(FILES))
def test_connect_writes_the_documented_stdio_entry_and_keeps_the_rest(home, host):
    path = seed(home, host)
    path.chmod(0o640)
    before = path.read_bytes()

    dry = connect(host)
    assert dry.exit_code == 0, dry.output
    assert f"+++ {path}" in dry.output and "dry run: nothing was written" in dry.output
    assert FATHOM in dry.output
    assert path.read_bytes() == before and not path.with_name(path.name + ".bak").exists()

    wrote = connect(host, "--write")
    assert wrote.exit_code == 0, wrote.output
    config = parsed(host, path)
    entry = servers_of(host, config)["fathom"]
    assert entry["command"] == FATHOM and entry["args"] == ["mcp"]  # the default data dir
    if host in ("vscode", "claude"):
        assert entry["type"] == "stdio"
    # Every other server and setting is kept.
    assert {k: v for k, v in servers_of(host, config)["other"].items() if k != "type"} == OTHER_SERVER
    if host == "codex":
        assert config["model"] == "o3" and "# a server of mine" in path.read_text()
    else:
        assert all(config[k] == v for k, v in OTHER_JSON.items())
    assert path.with_name(path.name + ".bak").read_bytes() == before
    assert path.stat().st_mode & 0o777 == 0o640  # the host's file keeps its permissions

    after = path.read_bytes()
    again = connect(host, "--write")
    assert again.exit_code == 0 and "nothing to change" in again.output
    assert path.read_bytes() == after and not path.with_name(path.name + ".bak.1").exists()

    # The entry already there, in the user's own layout, is left as it is too.
    relaid = (
        after.decode().replace('args = ["mcp"]', 'args = [ "mcp" ]')
        if host == "codex"
        else json.dumps(json.loads(after), indent=4)
    )
    path.write_text(relaid)
    assert "nothing to change" in connect(host, "--write").output and path.read_text() == relaid


@pytest.mark.parametrize("host", list(FILES))
def test_connect_http_names_the_token_variable_never_a_token(home, host, monkeypatch):
    monkeypatch.setenv("FATHOM_MCP_TOKEN", "fm_secret_value_never_written")
    result = connect(host, "--http", "--write")
    assert result.exit_code == 0, result.output
    path = home / FILES[host]
    text = path.read_text()
    assert "fm_secret_value_never_written" not in text + result.output
    config = parsed(host, path)
    entry = servers_of(host, config)["fathom"]
    url = "http://127.0.0.1:8766/mcp"
    if host == "gemini":  # Gemini's `url` means SSE: streamable HTTP is `httpUrl`.
        assert entry == {"httpUrl": url, "headers": {"Authorization": "Bearer $FATHOM_MCP_TOKEN"}}
    elif host == "codex":
        assert entry == {"url": url, "bearer_token_env_var": "FATHOM_MCP_TOKEN"}
    elif host == "vscode":
        assert entry["type"] == "http" and entry["url"] == url
        assert entry["headers"]["Authorization"] == "Bearer ${input:fathom-mcp-token}"
        assert config["inputs"][0]["id"] == "fathom-mcp-token" and config["inputs"][0]["password"]
    elif host == "cursor":
        assert entry == {"url": url, "headers": {"Authorization": "Bearer ${env:FATHOM_MCP_TOKEN}"}}
    else:
        assert entry == {
            "type": "http",
            "url": url,
            "headers": {"Authorization": "Bearer ${FATHOM_MCP_TOKEN}"},
        }
    assert connect(host, "--http", "--write").output.startswith(f"{path} already has")


@pytest.mark.parametrize("host", list(FILES))
def test_a_file_that_does_not_parse_is_refused_unchanged(home, host):
    path = home / FILES[host]
    path.parent.mkdir(parents=True, exist_ok=True)
    broken = (
        'model = "o3\n[mcp_servers.other]\n'
        if host == "codex"
        else '{\n  // a comment\n  "mcpServers": {},\n}\n'
    )
    path.write_text(broken)
    result = connect(host, "--write")
    assert result.exit_code == 2
    assert str(path) in " ".join(result.output.split()) and "not changed" in result.output
    assert path.read_text() == broken
    assert not path.with_name(path.name + ".bak").exists()


def test_a_non_default_data_dir_is_named_in_the_entry(home, tmp_path):
    data = tmp_path / "elsewhere"
    result = connect("cursor", "--data-dir", str(data), "--write")
    assert result.exit_code == 0, result.output
    entry = json.loads((home / FILES["cursor"]).read_text())["mcpServers"]["fathom"]
    assert entry["args"] == ["mcp", "--data-dir", str(data)]


def test_workspace_writes_the_projects_own_file(home, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    assert connect("vscode", "--workspace", str(project), "--write").exit_code == 0
    assert "fathom" in json.loads((project / ".vscode" / "mcp.json").read_text())["servers"]
    assert not (home / FILES["vscode"]).exists()


def test_codex_entry_is_replaced_in_place_keeping_the_next_tables_comment():
    old = (
        '[mcp_servers.fathom]\ncommand = "/old/fathom"\nargs = ["mcp"]\n\n'
        '[mcp_servers.fathom.env]\nX = "1"\n\n# mine\n[mcp_servers.other]\ncommand = "npx"\n'
    )
    new = updated_text("codex", Path("config.toml"), old, Launch(command="/new/fathom", args=("mcp",)))
    assert tomllib.loads(new)["mcp_servers"] == {
        "fathom": {"command": "/new/fathom", "args": ["mcp"]},
        "other": {"command": "npx"},
    }
    assert "# mine\n[mcp_servers.other]" in new and "/old/fathom" not in new


def test_codex_entry_written_inline_is_refused_not_duplicated():
    old = 'mcp_servers = { fathom = { command = "/old/fathom" } }\n'
    with pytest.raises(HostConfigUnreadable, match="could not be placed"):
        updated_text("codex", Path("config.toml"), old, Launch(command="/new/fathom", args=("mcp",)))


def test_an_unknown_host_is_refused_with_the_choices(home):
    result = connect("zed")
    assert result.exit_code == 2 and "claude, cursor, vscode, gemini, codex" in result.output


@pytest.mark.slow
async def test_the_written_stdio_entry_starts_fathom_for_a_real_mcp_client(tmp_path):
    """The operator's path: `fathom connect gemini --write` in a fresh HOME, then the host
    spawns exactly what the file says; a real MCP client session lists the tools."""
    home = tmp_path / "home"
    home.mkdir()
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FATHOM_")} | {
        "HOME": str(home),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        # The entry bridges to a background Fathom, which stops a few seconds after this
        # session instead of the default half hour.
        "FATHOM_DAEMON_IDLE_MINUTES": "0.05",
    }
    done = subprocess.run(
        [FATHOM, "connect", "gemini", "--data-dir", str(data), "--write"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    entry = json.loads((home / FILES["gemini"]).read_text())["mcpServers"]["fathom"]
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env=env)
    async with asyncio.timeout(240):
        async with Client(params, read_timeout_seconds=180) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"search_code", "list_projects"} <= names
            listed = await client.call_tool("list_projects", {})
            assert not listed.is_error
