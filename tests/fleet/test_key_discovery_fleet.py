"""Key discovery and budget-sized cloud lanes through the real path (issue 14): a real server
(in a thread), a real `fathom sidecar` process holding the key, and the OpenRouter emulator over
HTTP. The server never holds the key, yet its budget learns what the key may do, `fathom budget`
says where its ceiling came from, and the requests in flight at the upstream follow the budget.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import typer
from typer.testing import CliRunner

from fathom.cli.operator import register
from fathom.devtools.emulator import MINILM
from fathom.fleet.remote import SidecarThrottled
from fathom.roles import Role
from tests.fleet.fleet_fixtures import (
    ADMIN,
    ProcessGroup,
    ThreadedServer,
    build_app,
    spawn_sidecar,
    wait_until,
)
from tests.inference.e2e_fixtures import all_rows, write_functions

pytestmark = pytest.mark.slow

KEY = "sk-or-v1-" + "k3yd1sc0very" * 5
NAME = "gpu-1"
CE = Role.CODE_EMBEDDING
CLOUD_CODE = f"sidecar:{NAME}:{CE}:cloud:alpha"


class Live:
    def __init__(self, running: ThreadedServer, url: str, tmp: Path, group: ProcessGroup):
        self.running, self.url, self.tmp, self.group = running, url, tmp, group
        self.app = running.app
        self.hub = self.app.state.hub
        self.budget = self.app.state.budget
        self.service = self.app.state.service
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60)

    def sidecar(self, emulator, *extra: str):
        self.hub.auth.approve(NAME)
        port = int(self.url.rsplit(":", 1)[1])
        proc = spawn_sidecar(
            self.group, NAME, port, [], extra=["--openrouter-url", emulator.base_url, *extra]
        )
        wait_until(
            lambda: NAME in self.hub.connected() and CLOUD_CODE in self.app.state.registry,
            f"{NAME} and its cloud route",
            procs=[proc],
        )
        return proc

    def push_key(self) -> None:
        r = self.http.post("/admin/key", json={"key": KEY})
        assert r.status_code == 200 and r.json()["acked"] == [NAME], r.text
        assert KEY not in r.text


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    app, hub, _ = build_app(tmp_path / "data")
    # A cloud-only code table on MiniLM, pinned to the emulator's `alpha` upstream.
    hub.routing.update(
        {
            CE: {"policy": "cloud", "model": MINILM, "upstream": "alpha", "width": 384},
            Role.EMBEDDING: {"policy": "local"},
        }
    )
    running = ThreadedServer(app)
    url = running.start()
    group = ProcessGroup(tmp_path / "procs")
    live = Live(running, url, tmp_path, group)
    try:
        yield live
    finally:
        live.http.close()
        group.stop()
        running.stop()


def fathom_budget(url: str) -> str:
    cli = typer.Typer(no_args_is_help=True)

    @cli.callback()
    def main() -> None:
        """fathom (operator commands only)."""

    register(cli)
    r = CliRunner().invoke(
        cli,
        ["budget"],
        catch_exceptions=False,
        env={"FATHOM_SERVER": url, "FATHOM_ADMIN_TOKEN": ADMIN, "COLUMNS": "200"},
    )
    assert r.exit_code == 0, r.output
    return r.stdout


def test_the_sidecar_reads_the_keys_limits_and_the_servers_budget_learns_them(live: Live, emulator):
    emulator.control.set_key(rate_limit={"requests": 120, "interval": "1m"}, limit=None, limit_remaining=None)
    proc = live.sidecar(emulator, "--key-check-interval", "1.5")
    assert live.hub.key_check(NAME) is None  # no key yet: nothing to read
    assert "(default)" in fathom_budget(live.url)

    # On the push: the sidecar reads key-info (and tries credits), the budget learns 120/min.
    live.push_key()
    # The hub keeps the check, then hands it to the budget: wait for the budget, the later step.
    wait_until(lambda: live.budget.state().ceiling_origin != "default", "the budget to learn", procs=[proc])
    check = live.hub.key_check(NAME)
    assert (check.outcome, check.reason) == ("ok", "push")
    assert check.facts.rate_limit_requests == 120 and check.facts.rate_limit_interval == "1m"
    st = live.budget.state()
    assert (st.ceiling_source, st.ceiling_origin, st.window_armed) == (
        "littles-law",
        "discovered: 120 req/min",
        True,
    )
    assert "(discovered: 120 req/min)" in fathom_budget(live.url)
    budget = live.http.get("/admin/budget").json()
    assert budget["ceiling_origin"] == "discovered: 120 req/min"
    fleet = live.http.get("/admin/fleet")
    [mine] = [s for s in fleet.json()["sidecars"] if s["name"] == NAME]
    assert mine["key_check"]["outcome"] == "ok" and mine["key_check"]["reason"] == "push"
    assert KEY not in fleet.text and "emu...lator" not in fleet.text  # not even the masked label

    # Periodically: the key is re-read without any push; a changed limit is followed.
    emulator.control.set_key(rate_limit={"requests": 600, "interval": "1m"})
    wait_until(
        lambda: live.budget.state().ceiling_origin == "discovered: 600 req/min",
        "the periodic re-check",
        procs=[proc],
    )
    assert live.hub.key_check(NAME).reason == "periodic"

    # A revoked key: the check says so; the budget keeps what it learnt.
    emulator.control.key_fail(status=401, count=None)
    wait_until(lambda: live.hub.key_check(NAME).outcome == "rejected", "a rejected check", procs=[proc])
    assert live.budget.state().ceiling_origin == "discovered: 600 req/min"
    emulator.control.key_fail(status=402, count=None)
    wait_until(lambda: live.hub.key_check(NAME).outcome == "no_credits", "a no-credits check", procs=[proc])
    emulator.control.key_fail(status=401, count=0)

    # A storm of 429s on the cloud route makes the sidecar look again at once.
    emulator.control.set_limits(concurrency=0)
    emulator.control.set_key(rate_limit={"requests": 60, "interval": "1m"})
    for _ in range(5):
        with pytest.raises(SidecarThrottled):
            live.running.call(live.hub.command(NAME, "embed", CE, "cloud", {"texts": ["x"]}))
    wait_until(lambda: live.hub.key_check(NAME).reason == "storm", "the storm's re-check", procs=[proc])
    wait_until(lambda: live.budget.state().ceiling_origin == "discovered: 60 req/min", "60/min")

    # The key is in no log line of the sidecar, nor anywhere in the server's data dir.
    assert KEY not in proc.output()
    for path in (live.tmp / "data").rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_cloud_lanes_follow_the_budget_from_a_degenerate_key_to_an_override(live: Live, emulator):
    """Acceptance 2: with a degenerate key the cloud route starts at 4 in flight at the
    upstream; with `--override 16` (no rate limit) the emulator sees at least 12 at once."""
    emulator.control.set_key(rate_limit={"requests": -1, "interval": "1m"}, limit=None, limit_remaining=None)
    emulator.control.latency(base_ms=400)
    proc = live.sidecar(emulator)
    live.push_key()
    wait_until(lambda: live.hub.key_check(NAME), "the key check", procs=[proc])
    assert live.budget.state().ceiling_origin == "default"
    live.running.call(live.service.verify_providers("code"), timeout=120)

    def index(project: str) -> int:
        root = write_functions(live.tmp / project, files=8, per_file=20, tag=project, docstrings=False)
        emulator.control.reset()
        emulator.control.latency(base_ms=400)
        live.running.call(live.service.index(root, project), timeout=180)
        rows = all_rows(live.service, project, "code")
        assert len(rows) == len(set(rows)) == 160
        return emulator.control.counters()["peak_concurrency"]

    assert index("degenerate") == 4
    r = live.http.put("/admin/budget", json={"override": 16})
    assert r.status_code == 200 and r.json()["ceiling_origin"] == "override"
    peak = index("override")
    print(f"\npeak in flight at the upstream: 4 under the default, {peak} under --override 16")
    assert 12 <= peak <= 16

    # Outside index jobs too (a query, a probe, a rerank), the server's sidecar cloud route
    # is the budget's: six calls at once under an override of 2 put 2 in flight upstream.
    assert live.http.put("/admin/budget", json={"override": 2}).status_code == 200
    emulator.control.reset()
    emulator.control.latency(base_ms=300)
    route = live.app.state.registry.get(CLOUD_CODE)
    granted = live.budget.state().granted_total

    async def six_at_once() -> None:
        await asyncio.gather(*(route.embed([f"query {i}"]) for i in range(6)))

    live.running.call(six_at_once())
    assert emulator.control.counters()["peak_concurrency"] == 2
    assert live.budget.state().granted_total == granted + 6
    assert json.dumps(live.budget.state().to_dict()).count(KEY) == 0
