"""`fathom oauth show|set-mapping` against a running server: the set-up and the rules are shown
(never a secret), a mapping file is checked by the server before it is written (a bad one
changes nothing and names each problem), and a server without OAuth says how to turn it on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fathom.cli.oauth import register
from tests.fleet.fleet_fixtures import ADMIN, ThreadedServer
from tests.server.admin_fixtures import build_operator_app

ISSUER = "https://id.example.com/realms/dev"  # never dialled: these commands read the set-up only


def cli() -> typer.Typer:
    app = typer.Typer(no_args_is_help=True)

    @app.callback()
    def main() -> None:
        """fathom (oauth commands only)."""

    register(app)
    return app


def invoke(url: str, args: list[str]):
    return CliRunner().invoke(
        cli(),
        args,
        catch_exceptions=False,
        env={"FATHOM_SERVER": url, "FATHOM_ADMIN_TOKEN": ADMIN, "COLUMNS": "200"},
    )


def test_show_and_set_mapping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FATHOM_OAUTH_ISSUER", ISSUER)
    monkeypatch.setenv("FATHOM_OAUTH_RESOURCE", "https://fathom.example.com/mcp")
    monkeypatch.setenv("FATHOM_OAUTH_INTROSPECTION_URL", f"{ISSUER}/introspect")
    monkeypatch.setenv("FATHOM_OAUTH_CLIENT_ID", "fathom-rs")
    monkeypatch.setenv("FATHOM_OAUTH_CLIENT_SECRET", "a-client-secret-never-shown-0123")
    running = ThreadedServer(build_operator_app(tmp_path / "data"))
    url = running.start()
    try:
        r = invoke(url, ["oauth", "show"])
        assert r.exit_code == 0, r.output
        assert (
            ISSUER in r.output
            and "https://fathom.example.com/mcp" in r.output
            and "introspection" in r.output
        )
        assert "No rule yet" in r.output and "a-client-secret" not in r.output

        good = tmp_path / "mapping.json"
        good.write_text(
            json.dumps(
                {
                    "rules": [
                        {"match": {"email": "alice@example.com"}, "projects": ["api"]},
                        {"match": {"group": "ops"}, "can_index": True},
                    ]
                }
            )
        )
        r = invoke(url, ["oauth", "set-mapping", str(good)])
        assert r.exit_code == 0, r.output
        assert "email alice@example.com" in r.output and "group ops" in r.output
        written = (tmp_path / "data" / "oauth_mapping.json").read_text()

        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"rules": [{"match": {}, "projects": []}]}))
        r = invoke(url, ["oauth", "set-mapping", str(bad)])
        assert r.exit_code == 2, r.output
        assert "must name a condition" in r.output and "project list is empty" in r.output
        assert (tmp_path / "data" / "oauth_mapping.json").read_text() == written  # nothing changed
        (tmp_path / "notjson.json").write_text("{rules")
        r = invoke(url, ["oauth", "set-mapping", str(tmp_path / "notjson.json")])
        assert r.exit_code != 0 and "is not JSON" in r.output

        r = invoke(url, ["oauth", "show"])
        assert "1" in r.output and "api" in r.output and "every project" in r.output
    finally:
        running.stop()


def test_show_on_a_server_without_oauth_says_how_to_turn_it_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("FATHOM_OAUTH_ISSUER", raising=False)
    running = ThreadedServer(build_operator_app(tmp_path / "data"))
    url = running.start()
    try:
        r = invoke(url, ["oauth", "show"])
        assert r.exit_code == 0 and "OAuth: off" in r.output and "FATHOM_OAUTH_ISSUER" in r.output
        (tmp_path / "m.json").write_text(json.dumps({"rules": []}))
        r = invoke(url, ["oauth", "set-mapping", str(tmp_path / "m.json")])
        assert r.exit_code != 0 and "OAuth is off" in r.output
    finally:
        running.stop()
