"""The operator CLI against a running server: output, refusals with every problem, exit codes,
and the key never taken from argv nor printed."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fathom.cli.operator import register
from tests.fleet.fleet_fixtures import ADMIN, ThreadedServer, free_port, wait_until
from tests.server.admin_fixtures import FakeEncoder, build_operator_app, make_project


@pytest.fixture
def cli_app() -> typer.Typer:
    app = typer.Typer(no_args_is_help=True)

    @app.callback()
    def main() -> None:
        """fathom (operator commands only)."""

    register(app)
    return app


class Server:
    def __init__(self, running: ThreadedServer, url: str, data_dir: Path, tmp: Path):
        self.running, self.url, self.data_dir, self.tmp = running, url, data_dir, tmp

    @property
    def app(self):
        return self.running.app

    def add_provider(self, provider) -> None:
        async def add() -> None:
            self.app.state.registry.add(provider)

        self.running.call(add())


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    running = ThreadedServer(build_operator_app(tmp_path / "data"))
    url = running.start()
    try:
        yield Server(running, url, tmp_path / "data", tmp_path)
    finally:
        running.stop()


def invoke(
    cli_app: typer.Typer,
    server: Server | str,
    args: list[str],
    *,
    token: str = ADMIN,
    input: str | None = None,
    columns: int = 200,
):
    url = server if isinstance(server, str) else server.url
    result = CliRunner().invoke(
        cli_app,
        args,
        input=input,
        catch_exceptions=False,
        env={"FATHOM_SERVER": url, "FATHOM_ADMIN_TOKEN": token, "COLUMNS": str(columns)},
    )
    return result


def words(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_policy_show_and_set(cli_app, server: Server):
    r = invoke(cli_app, server, ["policy", "show"])
    assert r.exit_code == 0
    for role in ("embedding", "code-embedding", "reranker", "code-assistant", "rlm"):
        assert role in r.stdout
    r = invoke(cli_app, server, ["policy", "set", "rlm", "--policy", "local", "--model", "acme/small"])
    assert r.exit_code == 0, r.output
    assert "applied to rlm" in r.stdout and "pushed to: no sidecar" in r.stdout
    routing = server.data_dir / "routing.json"
    stored = json.loads(routing.read_text())["roles"]["rlm"]
    assert stored["policy"] == "local" and stored["model"] == "acme/small"


def test_a_refused_policy_prints_every_problem_and_exits_2(cli_app, server: Server):
    routing = server.data_dir / "routing.json"
    r = invoke(cli_app, server, ["policy", "set", "code-embedding", "--policy", "cloud", "--width", "99"])
    assert r.exit_code == 2
    out = words(r.output)
    assert "error: policy change refused (2 problems); nothing was written" in out
    assert "• code-embedding: policy cloud can send embeddings to OpenRouter but no upstream is pinned" in out
    assert "• code-embedding: width 99 does not match the code table's reference encoder (8-d)" in out
    assert not routing.exists()
    r = invoke(cli_app, server, ["policy", "set", "rlm"])
    assert r.exit_code == 2 and "nothing to change" in r.output
    r = invoke(cli_app, server, ["policy", "set", "wizard", "--policy", "local"])
    assert r.exit_code == 2 and "unknown role 'wizard'" in r.output


def test_key_push_reads_stdin_never_argv_and_never_prints_the_key(cli_app, server: Server):
    canary = "sk-or-v1-" + "5eed" * 16
    r = invoke(cli_app, server, ["key", "push"], input=canary + "\n")
    assert canary not in r.output
    assert r.exit_code == 1 and "no sidecar acknowledged the push" in words(r.output)
    last = json.loads((server.data_dir / "routing.json").read_text())["last_push"]
    assert last["acked"] == [] and canary not in json.dumps(last)
    r = invoke(cli_app, server, ["key", "push", "--key", canary])
    assert r.exit_code == 2 and "refusing a key on the command line" in words(r.output)
    assert canary not in r.output
    r = invoke(cli_app, server, ["key", "push"], input="\n")
    assert r.exit_code == 2 and "no key given" in r.output
    r = invoke(cli_app, server, ["key", "push", "--without-key"])
    assert r.exit_code == 0 and "pushed to: no sidecar" in r.output


def test_fleet_list_approve_revoke_token(cli_app, server: Server):
    r = invoke(cli_app, server, ["fleet"])
    assert r.exit_code == 0 and "Fleet" in r.stdout and "no key has been pushed yet" in r.stdout
    # A name no sidecar has connected under: a typo is refused, a pre-approval is explicit.
    r = invoke(cli_app, server, ["fleet", "approve", "gpu-z"])
    assert r.exit_code == 2 and "no sidecar named 'gpu-z' has connected" in r.output
    assert "fathom fleet approve gpu-z --pre-approve" in r.output
    r = invoke(cli_app, server, ["fleet", "list"])
    assert "gpu-z" not in r.stdout
    r = invoke(cli_app, server, ["fleet", "approve", "gpu-z", "--pre-approve"])
    assert r.exit_code == 0 and "gpu-z: approved (not connected now)" in r.stdout
    r = invoke(cli_app, server, ["fleet", "list"])
    assert "gpu-z" in r.stdout and "sidecar gpu-z is offline" in r.stdout
    r = invoke(cli_app, server, ["fleet", "revoke", "gpu-z"])
    assert r.exit_code == 0 and "gpu-z: revoked" in r.stdout
    r = invoke(cli_app, server, ["fleet", "approve", "not a name"])
    assert r.exit_code == 2
    r = invoke(cli_app, server, ["fleet", "token", "--name", "gpu-h"])
    assert r.exit_code == 0 and re.search(r"host token .*: \S{20,}", r.stdout)


def test_gate_verdicts_verify_and_audit(cli_app, server: Server):
    r = invoke(cli_app, server, ["gate", "verdicts"])
    assert r.exit_code == 0 and "no verdict yet" in r.stdout
    server.add_provider(FakeEncoder("fake:twin"))
    server.add_provider(FakeEncoder("fake:skewed", skew=0.6))
    r = invoke(cli_app, server, ["gate", "verify", "fake:twin", "--table", "code"])
    assert r.exit_code == 0, r.output
    assert "cleared" in r.stdout and "1.0000" in r.stdout and "cosine per probe" in r.stdout
    r = invoke(cli_app, server, ["gate", "verify", "fake:skewed", "--table", "code"])
    assert r.exit_code == 1
    out = words(r.output)
    assert "refused" in out and "error: the gate refused fake:skewed" in out and "minimum cosine 0." in out
    r = invoke(cli_app, server, ["gate", "verify", "nobody"])
    assert r.exit_code == 2 and "no live provider 'nobody'" in r.output
    r = invoke(cli_app, server, ["gate", "verdicts"])
    assert r.exit_code == 0 and "1 cleared, 1 refused, 0 quarantined" in r.stdout
    r = invoke(cli_app, server, ["gate", "audit", "ghost"])
    assert r.exit_code == 2 and "no project 'ghost'" in r.output


def test_budget_show_and_override(cli_app, server: Server):
    r = invoke(cli_app, server, ["budget"])
    assert r.exit_code == 0 and "4 (default)" in r.stdout and "cooldown left" in r.stdout
    r = invoke(cli_app, server, ["budget", "--override", "300"])
    assert r.exit_code == 2 and "from 1 to 256" in words(r.output)
    r = invoke(cli_app, server, ["budget", "--override", "16"])
    assert r.exit_code == 0 and "16 (override)" in r.stdout
    r = invoke(cli_app, server, ["budget", "--clear"])
    assert r.exit_code == 0 and "4 (default)" in r.stdout


def test_jobs_start_watch_list_and_refusals(cli_app, server: Server):
    project = make_project(server.tmp / "demo")
    r = invoke(cli_app, server, ["jobs", "start", str(project), "--project", "demo", "--watch"])
    assert r.exit_code == 0, r.output
    job_id = re.search(r"started job (\w+)", r.stdout).group(1)
    assert "done" in r.stdout
    r = invoke(cli_app, server, ["jobs"])
    assert r.exit_code == 0 and job_id in r.stdout and "demo" in r.stdout
    r = invoke(cli_app, server, ["jobs", "pause", job_id])
    assert r.exit_code == 2 and f"job {job_id} is done; there is nothing to pause" in r.output
    r = invoke(cli_app, server, ["jobs", "show", job_id])
    assert r.exit_code == 0 and "done" in r.stdout
    r = invoke(cli_app, server, ["jobs", "start", str(server.tmp / "missing")])
    assert r.exit_code == 2 and "no such folder" in r.output
    r = invoke(cli_app, server, ["gate", "audit", "demo"])
    assert r.exit_code == 0 and "hash:test/hash-embedder" in r.stdout


def test_printed_tokens_and_client_setups_come_out_whole_in_a_narrow_terminal(cli_app, server: Server):
    # 40 columns: a wrapped line would split the token or drop the header from a paste.
    r = invoke(cli_app, server, ["tokens", "create", "--name", "a-developer-with-a-long-name"], columns=40)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    token = next(line for line in lines if line.startswith("MCP token for ")).rsplit(": ", 1)[1]
    assert re.fullmatch(r"fm_\S{20,}", token), lines
    assert (
        f'use it: claude mcp add --transport http fathom {server.url}/mcp --header "Authorization: Bearer '
        f'{token}"' in lines
    ), lines
    r = invoke(cli_app, server, ["fleet", "token", "--name", "gpu-host-with-a-long-name"], columns=40)
    assert r.exit_code == 0, r.output
    assert re.fullmatch(r"host token \(shown once; only its hash is kept\): \S{20,}", r.stdout.strip()), (
        r.stdout
    )


def test_a_wrong_token_or_no_server_exits_1(cli_app, server: Server):
    r = invoke(cli_app, server, ["budget"], token="fa_wrong")
    assert r.exit_code == 1 and "refused the admin token" in words(r.output)
    r = invoke(cli_app, f"http://127.0.0.1:{free_port()}", ["fleet"])
    assert r.exit_code == 1 and "cannot reach the fathom server" in words(r.output)


def test_the_admin_token_goes_over_plain_http_only_to_this_machine(cli_app, server: Server):
    """An operator command pointed at another host over plain http:// is refused before any
    request: the admin token would cross the network in clear text."""
    for far in ("http://10.0.0.5:8765", "http://fathom.example.net"):
        r = invoke(cli_app, far, ["policy", "show"])
        assert r.exit_code == 2, r.output
        said = words(r.output)
        assert "clear text" in said and "https://" in said and ADMIN not in r.output
    assert invoke(cli_app, server, ["policy", "show"]).exit_code == 0


def test_the_fathom_command_carries_the_operator_commands(server: Server):
    from fathom.cli import app as fathom_app

    r = invoke(fathom_app, server, ["budget"])
    assert r.exit_code == 0 and "4 (default)" in r.stdout
    r = invoke(fathom_app, server, ["--help"])
    for group in ("policy", "key", "fleet", "gate", "budget", "jobs"):
        assert group in r.stdout
    # Help that reads right: every option says what it is for, and a flag shows no `<bool>`.
    for command, said in (
        (["jobs", "start"], "Rebuild in a shadow table"),
        (["search"], "Only this project"),
        (["ask"], "Only this project"),
        (["jobs", "list"], "List every job"),
    ):
        r = invoke(fathom_app, server, [*command, "--help"])
        assert r.exit_code == 0 and said in words(r.stdout), (command, r.stdout)
        assert "<bool>" not in r.stdout, (command, r.stdout)


def test_tokens_create_list_revoke_and_the_audit_log(cli_app, server: Server):
    r = invoke(cli_app, server, ["tokens", "list"])
    assert (
        r.exit_code == 0
        and "no MCP token yet" in r.stdout
        and "no folder can be indexed over MCP" in r.stdout
    )
    r = invoke(
        cli_app, server, ["tokens", "create", "--name", "alice", "--project", "api", "--project", "web"]
    )
    assert r.exit_code == 0, r.output
    token = re.search(r"\(shown once; only its hash is kept\): (fm_\S+)", r.stdout).group(1)
    assert "it sees: api, web; read-only" in r.stdout
    assert (
        f'claude mcp add --transport http fathom {server.url}/mcp --header "Authorization: Bearer {token}"'
        in " ".join(r.stdout.split())
    )
    r = invoke(cli_app, server, ["tokens", "create", "--name", "alice"])
    assert r.exit_code == 2 and "exists already" in r.output
    r = invoke(cli_app, server, ["tokens", "list"])
    assert "alice" in r.stdout and "api, web" in r.stdout and token not in r.stdout
    r = invoke(cli_app, server, ["tokens", "revoke", "alice"])
    assert r.exit_code == 0 and "alice: revoked" in r.stdout
    r = invoke(cli_app, server, ["tokens", "revoke", "alice"])
    assert r.exit_code == 2 and "no MCP token named 'alice'" in r.output
    # An MCP token is refused by every operator command.
    r = invoke(cli_app, server, ["tokens", "create", "--name", "bob"])
    bob = re.search(r"(fm_\S+)", r.stdout).group(1)
    r = invoke(cli_app, server, ["fleet"], token=bob)
    assert r.exit_code == 1 and "needs the admin token" in r.output

    r = invoke(cli_app, server, ["audit-log"])
    assert r.exit_code == 0, r.output
    log = " ".join(r.stdout.split())
    assert (
        "created MCP token alice (projects: api, web; read-only)" in log and "revoked MCP token alice" in log
    )
    assert "refused 404" in log and "mcp:bob" in log and "refused 403" in log
    assert token not in r.stdout and bob not in r.stdout


def test_provider_ids_print_byte_for_byte_as_the_api_returns_them(cli_app, tmp_path: Path):
    """An id holding an emoji code (`:cloud:`) and brackets is printed as the API returns it:
    never an emoji, never eaten as markup, in `policy show`, `gate verdicts` and `gate audit`."""
    import httpx

    from tests.fleet.fleet_fixtures import ADMIN as TOKEN

    reference = FakeEncoder("sidecar:sc1:code-embedding:cloud:alpha")
    twin = FakeEncoder("sidecar:sc1:embedding:cloud:[bold]beta[/]")
    running = ThreadedServer(build_operator_app(tmp_path / "data", encoder=reference))
    url = running.start()
    server = Server(running, url, tmp_path / "data", tmp_path)
    try:
        server.add_provider(twin)
        project = make_project(tmp_path / "demo")
        assert (
            invoke(cli_app, server, ["jobs", "start", str(project), "--project", "demo", "--watch"]).exit_code
            == 0
        )
        assert invoke(cli_app, server, ["gate", "verify", twin.id, "--table", "code"]).exit_code == 0
        api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"})
        ids = {
            "policy show": {
                p["id"] for r in api.get("/admin/policies").json()["roles"].values() for p in r["providers"]
            },
            "gate verdicts": {v["provider"] for v in api.get("/admin/gate/verdicts").json()["verdicts"]},
            "gate audit demo": {c["provider"] for c in api.get("/admin/gate/audit/demo").json()["counts"]},
        }
        api.close()
        assert reference.id in ids["policy show"] and twin.id in ids["policy show"]
        assert twin.id in ids["gate verdicts"] and reference.id in ids["gate audit demo"]
        for command, expected in ids.items():
            r = invoke(cli_app, server, command.split())
            assert r.exit_code == 0, r.output
            for pid in expected:
                assert pid in r.stdout, f"{command} does not print {pid!r} as it is:\n{r.stdout}"
            assert "☁" not in r.stdout
    finally:
        running.stop()


def test_fleet_rows_read_right_and_skipped_folders_are_not_counted_as_files(monkeypatch):
    from rich.console import Console

    from fathom.cli import fleet as cli_fleet
    from fathom.cli.core import skipped_files

    sidecar = {
        "name": "gpu-1",
        "state": "approved",
        "connected": True,
        "key_present": True,
        "last_seen_s": 0.4,
        "load": 3.1123046875,
        "in_flight": 0,
        "routes": [],
        "problems": [],
        "cloud": [
            {"provider": "sidecar:gpu-1:embedding:cloud:alpha", "state": "no_credits"},
            {"provider": "sidecar:gpu-1:rlm:cloud:auto", "state": "no_credits"},
        ],
    }
    monkeypatch.setattr(cli_fleet, "console", Console(width=250, emoji=False, highlight=False))
    with cli_fleet.console.capture() as shown:
        cli_fleet.print_fleet({"sidecars": [sidecar], "problems": [], "last_push": None})
    out = shown.get()
    assert "3.11" in out and "3.1123" not in out and "no credits" in out
    # node_modules/ and dist/ are named on their own line, not counted among the skipped files.
    assert skipped_files(
        {"ignored-dir": 2, "binary": 3, "gitignored": 1},
        {"ignored-dir": ["node_modules", "web/node_modules"], "gitignored": ["dist"]},
    ) == {"binary": 3}


def test_fathom_drop_through_a_server_takes_the_admin_token_from_the_environment_only(server: Server):
    from fathom.cli import app as fathom_app

    project = make_project(server.tmp / "demo")
    assert (
        invoke(fathom_app, server, ["jobs", "start", str(project), "--project", "demo", "--watch"]).exit_code
        == 0
    )
    local = ["--data-dir", str(server.tmp / "cli")]  # this CLI's own data dir holds nothing
    drop = [*local, "drop", "demo", "--server", server.url]
    # No admin token in the environment: refused, saying where it goes; never taken from argv.
    r = invoke(fathom_app, server, drop, token="")
    assert r.exit_code == 2 and "set FATHOM_ADMIN_TOKEN in the environment" in words(r.output), r.output
    r = invoke(fathom_app, server, [*drop, "--token", ADMIN])
    assert r.exit_code == 2 and "No such option" in r.output
    r = invoke(fathom_app, server, drop, token="fa_wrong")
    assert r.exit_code == 1 and "refused the admin token in FATHOM_ADMIN_TOKEN" in words(r.output), r.output
    # An unknown project is said as in-process, before any question; a "no" drops nothing.
    r = invoke(fathom_app, server, [*local, "drop", "ghost", "--server", server.url, "--yes"])
    assert r.exit_code == 1 and "no project 'ghost'" in r.output and "Known projects: demo" in words(r.output)
    r = invoke(fathom_app, server, drop, input="n\n")
    assert r.exit_code == 1 and "Remove project 'demo'" in r.output
    assert "demo" in invoke(fathom_app, server, ["--data-dir", str(server.tmp / "cli"), "jobs"]).stdout
    r = invoke(fathom_app, server, [*drop, "--yes"])
    assert r.exit_code == 0, r.output
    assert re.search(
        rf"dropped demo on the fathom server at {re.escape(server.url)} \(code \d+, docs \d+\)", r.stdout
    )
    assert server.running.call(_listed(server.app)) == []


def test_fathom_watching_through_a_server_stops_and_starts_its_watcher_at_once(tmp_path: Path):
    from fathom.cli import app as fathom_app
    from fathom.config import Settings

    data = tmp_path / "data"  # a server that watches (the tests' default is FATHOM_WATCH=0)
    running = ThreadedServer(build_operator_app(data, settings=Settings(data_dir=data, watch=True)))
    server = Server(running, running.start(), data, tmp_path)
    try:
        project = make_project(tmp_path / "demo")
        r = invoke(fathom_app, server, ["jobs", "start", str(project), "--project", "demo", "--watch"])
        assert r.exit_code == 0, r.output
        service = server.app.state.service

        def state() -> dict:
            return service.watch_state("demo")

        local = ["--data-dir", str(tmp_path / "cli")]  # this CLI's own data dir holds nothing
        wait_until(lambda: state()["state"] == "watching", "the server to watch demo", timeout=60)
        r = invoke(fathom_app, server, [*local, "watching", "demo", "--server", server.url])
        assert r.exit_code == 0 and "demo: live sync on (watching)" in r.stdout, r.output
        r = invoke(fathom_app, server, [*local, "watching", "demo", "--off", "--server", server.url])
        assert r.exit_code == 0 and "demo: live sync off" in r.stdout, r.output
        assert not state()["enabled"] and state()["state"] == "off"  # the server's watcher, not a file
        r = invoke(fathom_app, server, [*local, "watching", "demo", "--on", "--server", server.url])
        assert r.exit_code == 0 and "demo: live sync on" in r.stdout, r.output
        wait_until(lambda: state()["state"] == "watching", "the server to watch demo again", timeout=60)
        r = invoke(fathom_app, server, [*local, "watching", "ghost", "--off", "--server", server.url])
        assert r.exit_code == 1 and "ghost" in r.output, r.output
        r = invoke(
            fathom_app, server, [*local, "watching", "demo", "--off", "--server", server.url], token=""
        )
        assert r.exit_code == 2 and "set FATHOM_ADMIN_TOKEN in the environment" in words(r.output), r.output
        assert state()["enabled"]
    finally:
        running.stop()


async def _listed(app) -> list[str]:
    return [p.name for p in app.state.service.projects()]


def test_fathom_drop_through_a_fathom_serve_is_refused_with_why(tmp_path: Path):
    from fathom.cli import app as fathom_app
    from fathom.config import Settings
    from fathom.server.mcp_http import standalone_app
    from fathom.server.mcp_tools import build_mcp_server
    from fathom.service import Fathom

    # A real `fathom serve` app without a token: it serves MCP and searches, no admin API.
    service = Fathom(Settings(data_dir=tmp_path / "serve"), encoder=FakeEncoder("local:hash"))
    running = ThreadedServer(standalone_app(build_mcp_server(service), host="127.0.0.1"))
    url = running.start()
    try:
        r = invoke(
            fathom_app,
            url,
            ["--data-dir", str(tmp_path / "cli"), "drop", "demo", "--server", url, "--yes"],
            token="",
        )
    finally:
        running.stop()
    said = words(r.output)
    assert r.exit_code == 2 and f"the server at {url} has no admin API for dropping" in said, r.output
    assert "without --server" in said
