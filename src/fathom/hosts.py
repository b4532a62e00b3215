"""Where each MCP host keeps its servers, and Fathom's entry in that file.

What it owns: the five hosts `fathom connect` knows (Claude Code, Cursor, VS Code, Gemini CLI,
Codex), the path of each one's config file, the shape of Fathom's entry in it (each as the
host documents it: docs/hosts.md cites which), and the edit itself, text in and text out, so
it is tested without a disk or a home. Every other server, setting and key of the file is
kept; an entry already as wanted changes nothing (the same text comes back).

What it refuses: a file it cannot parse (JSON with comments, broken TOML, a top level or a
server list that is not a table) is never rewritten: `HostConfigUnreadable` names the file and
what is wrong with it. A TOML edit whose result does not parse back to the old file plus
Fathom's entry alone is refused the same way. It never writes a token: an HTTP entry names
the environment variable (`FATHOM_MCP_TOKEN`) or VS Code prompt that the host fills in.
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fathom.errors import ConfigError

ENTRY = "fathom"
TOKEN_ENV = "FATHOM_MCP_TOKEN"
VSCODE_INPUT = "fathom-mcp-token"
HOSTS = ("claude", "cursor", "vscode", "gemini", "codex")


class UnknownHost(ConfigError):
    """A host name `fathom connect` does not know."""

    def __init__(self, name: str):
        self.name = name
        super().__init__(f"unknown host {name!r}: choose one of {', '.join(HOSTS)}")


class HostConfigUnreadable(ConfigError):
    """The host's config file does not parse (or would not, edited): it was left as it is."""

    def __init__(self, path: Path, reason: str):
        self.path, self.reason = path, reason
        super().__init__(
            f"{path}: {reason}; the file was not changed. Fix it (or move it "
            "away) and run `fathom connect` again, or add Fathom's entry by hand "
            "as docs/hosts.md shows"
        )


@dataclass(frozen=True)
class Launch:
    """How a host reaches Fathom: spawn `command args` (stdio) or call `url` (streamable HTTP)."""

    command: str = ""
    args: tuple[str, ...] = ()
    url: str | None = None


def check_host(name: str) -> str:
    if name not in HOSTS:
        raise UnknownHost(name)
    return name


def config_path(
    host: str, *, home: Path, env: dict[str, str], platform: str, workspace: Path | None = None
) -> Path:
    """The file `host` reads its MCP servers from: the user's, or `workspace`'s own."""
    if workspace is not None:
        return (
            workspace
            / {
                "claude": ".mcp.json",
                "cursor": ".cursor/mcp.json",
                "vscode": ".vscode/mcp.json",
                "gemini": ".gemini/settings.json",
                "codex": ".codex/config.toml",
            }[host]
        )
    if host == "claude":
        return home / ".claude.json"
    if host == "cursor":
        return home / ".cursor" / "mcp.json"
    if host == "gemini":
        return home / ".gemini" / "settings.json"
    if host == "codex":
        return Path(env.get("CODEX_HOME") or home / ".codex") / "config.toml"
    # VS Code keeps the user's mcp.json in its user-data folder, which differs by platform.
    if platform == "darwin":
        user = home / "Library" / "Application Support" / "Code" / "User"
    elif platform.startswith("win"):
        user = Path(env.get("APPDATA") or home / "AppData" / "Roaming") / "Code" / "User"
    else:
        user = Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "Code" / "User"
    return user / "mcp.json"


def entry_for(host: str, launch: Launch) -> dict[str, Any]:
    """Fathom's entry in `host`'s format. A token is never written: each host fills in its own
    reference to one (an environment variable, or VS Code's password prompt)."""
    if launch.url is None:
        spawn: dict[str, Any] = {"command": launch.command, "args": list(launch.args)}
        # VS Code requires `type`; Claude Code documents it. The others infer stdio.
        return {"type": "stdio", **spawn} if host in ("claude", "vscode") else spawn
    if host == "codex":  # Codex refuses an inline bearer token: it reads a variable's name.
        return {"url": launch.url, "bearer_token_env_var": TOKEN_ENV}
    bearer = {
        "claude": f"Bearer ${{{TOKEN_ENV}}}",
        "cursor": f"Bearer ${{env:{TOKEN_ENV}}}",
        "vscode": f"Bearer ${{input:{VSCODE_INPUT}}}",
        "gemini": f"Bearer ${TOKEN_ENV}",
    }[host]
    headers = {"Authorization": bearer}
    if host == "gemini":  # Gemini's `url` is SSE; streamable HTTP is `httpUrl`.
        return {"httpUrl": launch.url, "headers": headers}
    if host == "cursor":
        return {"url": launch.url, "headers": headers}
    return {"type": "http", "url": launch.url, "headers": headers}


def updated_text(host: str, path: Path, old: str | None, launch: Launch) -> str:
    """The file's text with Fathom's entry in it; `old` itself when it is already there as
    wanted. `old` is None for a file that does not exist yet."""
    entry = entry_for(host, launch)
    if host == "codex":
        return _toml_updated(path, old, entry)
    return _json_updated(host, path, old, entry)


def unified_diff(path: Path, old: str | None, new: str) -> str:
    return "".join(
        difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=str(path) if old is not None else "/dev/null",
            tofile=str(path),
        )
    )


def _json_updated(host: str, path: Path, old: str | None, entry: dict[str, Any]) -> str:
    data: Any = {}
    if old is not None and old.strip():
        try:
            data = json.loads(old)
        except json.JSONDecodeError as exc:
            raise HostConfigUnreadable(
                path, f"not valid JSON ({exc}); comments and trailing commas are not read here"
            ) from None
    if not isinstance(data, dict):
        raise HostConfigUnreadable(path, "its top level is not a JSON object")
    key = "servers" if host == "vscode" else "mcpServers"
    servers = data.get(key, {})
    if not isinstance(servers, dict):
        raise HostConfigUnreadable(path, f'its "{key}" is not a JSON object')
    changed = dict(data)
    changed[key] = {**servers, ENTRY: entry}
    if host == "vscode" and f"${{input:{VSCODE_INPUT}}}" in json.dumps(entry):
        inputs = data.get("inputs", [])
        if not isinstance(inputs, list):
            raise HostConfigUnreadable(path, 'its "inputs" is not a JSON array')
        if not any(isinstance(i, dict) and i.get("id") == VSCODE_INPUT for i in inputs):
            changed["inputs"] = [
                *inputs,
                {
                    "type": "promptString",
                    "id": VSCODE_INPUT,
                    "password": True,
                    "description": "Fathom's MCP token (fathom serve prints it on its first start)",
                },
            ]
    if old is not None and changed == data:
        return old
    return json.dumps(changed, indent=2, ensure_ascii=False) + "\n"


# `[mcp_servers.fathom]` and its sub-tables (`[mcp_servers.fathom.env]`), quoted or not.
_OUR_HEADER = re.compile(
    r'^\s*\[\s*mcp_servers\s*\.\s*("fathom"|\'fathom\'|fathom)\s*(\.[^\]]*)?\]\s*(#.*)?$'
)
_ANY_HEADER = re.compile(r"^\s*\[")


def _toml_updated(path: Path, old: str | None, entry: dict[str, Any]) -> str:
    text = old or ""
    data = _toml_parsed(path, text, "not valid TOML")
    servers = data.get("mcp_servers", {})
    if not isinstance(servers, dict):
        raise HostConfigUnreadable(path, "its mcp_servers is not a table")
    if servers.get(ENTRY) == entry and old is not None:
        return old
    block = f"[mcp_servers.{ENTRY}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in entry.items())
    lines = text.splitlines(keepends=True)
    span = _our_table(lines)
    if span is not None:
        start, end = span
        new = "".join(lines[:start]) + block + "".join(lines[end:])
    else:
        if text and not text.endswith("\n"):
            text += "\n"
        new = text + ("\n" if text.strip() else "") + block
    # The edit is textual (no TOML writer keeps comments): it stands only if the result reads
    # back as the old file with Fathom's entry alone changed (an entry written inline, or as
    # dotted keys elsewhere, fails this and is refused rather than duplicated).
    expected = {**data, "mcp_servers": {**servers, ENTRY: entry}}
    if _toml_parsed(path, new, "Fathom's entry could not be placed in it safely") != expected:
        raise HostConfigUnreadable(
            path, "Fathom's entry could not be placed in it safely (it is defined inline or with dotted keys)"
        )
    return new


def _our_table(lines: list[str]) -> tuple[int, int] | None:
    """The lines of `[mcp_servers.fathom]` and its sub-tables, without the comments and blank
    lines at its end (those belong to the next table)."""
    start = next((i for i, line in enumerate(lines) if _OUR_HEADER.match(line)), None)
    if start is None:
        return None
    end = start + 1
    while end < len(lines) and (not _ANY_HEADER.match(lines[end]) or _OUR_HEADER.match(lines[end])):
        end += 1
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return start, end


def _toml_parsed(path: Path, text: str, what: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HostConfigUnreadable(path, f"{what} ({exc})") from None


def _toml_value(value: Any) -> str:
    # A JSON string without ASCII escaping is a TOML basic string (the same escapes).
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(value, ensure_ascii=False)
