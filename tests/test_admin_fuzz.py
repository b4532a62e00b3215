"""Fuzzing the admin API's OpenAPI schema with schemathesis, the admin token set: no 5xx.

The schema comes from the app itself; the requests go to a real server on 127.0.0.1 (in a
thread), so index jobs a fuzzed request starts run in the server's loop like in production.
A fuzzed job path is pointed at a tiny project: a fuzzer that guessed `/` must not index the
machine. The example count is bounded per operation.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from tests.admin_fixtures import AUTH, build_operator_app, make_project
from tests.fleet_fixtures import ThreadedServer


def _schema() -> dict:
    with tempfile.TemporaryDirectory() as d:
        return build_operator_app(Path(d)).openapi()


schema = schemathesis.openapi.from_dict(_schema())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    base = tmp_path_factory.mktemp("fuzz")
    project = make_project(base / "project")
    running = ThreadedServer(build_operator_app(base / "data"))
    url = running.start()
    try:
        yield url, project
    finally:
        running.stop()


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_no_server_error(case, server):
    url, project = server
    if case.path == "/admin/jobs" and case.method.upper() == "POST" and isinstance(case.body, dict) \
            and isinstance(case.body.get("path"), str) and case.body["path"].startswith("/"):
        case.body["path"] = str(project)
    case.call_and_validate(base_url=url, headers=AUTH, checks=[not_a_server_error])
