"""Fuzzing the admin API's OpenAPI schema with schemathesis, the admin token set: no 5xx.

The schema comes from the app itself; the requests go to a real server on 127.0.0.1 (in a
thread), so index jobs a fuzzed request starts run in the server's loop like in production.
A fuzzed job path is pointed at a tiny project: a fuzzer that guessed `/` must not index the
machine. The example count is bounded per operation.

The server is fuzzed in a state that once answered 500s: the code table's role set (behind
`policy set`'s back, as a routing file from an older server could be) to a model no local
reference serves under `aggregate`, so every build of that table and every verify for it is
refused, with a 4xx naming the fix.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from fathom.config import RoutingStore
from fathom.roles import Role
from tests.fleet.fleet_fixtures import ThreadedServer
from tests.server.admin_fixtures import AUTH, build_operator_app, make_project


def _schema() -> dict:
    with tempfile.TemporaryDirectory() as d:
        return build_operator_app(Path(d)).openapi()


schema = schemathesis.openapi.from_dict(_schema())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    base = tmp_path_factory.mktemp("fuzz")
    project = make_project(base / "project")
    RoutingStore(base / "data").update(
        {Role.CODE_EMBEDDING: {"policy": "aggregate", "model": "other/unserved-model", "upstream": "alpha"}}
    )
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
    if (
        case.path == "/admin/jobs"
        and case.method.upper() == "POST"
        and isinstance(case.body, dict)
        and isinstance(case.body.get("path"), str)
        and case.body["path"].startswith("/")
    ):
        case.body["path"] = str(project)
    case.call_and_validate(base_url=url, headers=AUTH, checks=[not_a_server_error])


def test_a_role_no_reference_serves_is_refused_with_4xx_naming_the_fix(server):
    url, project = server
    with httpx.Client(base_url=url, headers=AUTH, timeout=60) as client:
        providers = client.get("/admin/policies").json()["roles"]["embedding"]["providers"]
        encoder = next(p["id"] for p in providers if p["kind"] == "local")
        r = client.post("/admin/gate/verify", json={"provider": encoder, "table": "code"})
        assert r.status_code == 409 and "other/unserved-model" in r.text and "sidecar" in r.text, r.text
        # `policy set` refuses to put a role in that state, and writes nothing.
        before = client.get("/admin/policies").json()["roles"]["embedding"]
        r = client.put(
            "/admin/policies", json={"embedding": {"model": "other/unserved-model", "upstream": "alpha"}}
        )
        assert r.status_code == 400 and "join a sidecar serving other/unserved-model" in r.text, r.text
        assert client.get("/admin/policies").json()["roles"]["embedding"] == before
        # Under `cloud` the reference is a pinned cloud route, not a local encoder: accepted.
        r = client.put(
            "/admin/policies",
            json={"embedding": {"policy": "cloud", "model": "other/unserved-model", "upstream": "alpha"}},
        )
        assert r.status_code == 200, r.text
        r = client.put(
            "/admin/policies", json={"embedding": {"policy": "local", "model": None, "upstream": None}}
        )
        assert r.status_code == 200, r.text


# ---------------------------------------------------------------------------- hostile inputs

NUL_PATH = "/srv/pro\x00ject"
LONG_COMPONENT = "/srv/" + "a" * 300 + "/project"
HOSTILE_STRINGS = ("a\x00b", "x" * 300, "é" * 200, "../../etc", "%00", " ", "\x7f", "名" * 100)


def test_job_paths_the_os_cannot_hold_are_a_typed_400(server):
    url, project = server
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as client:
        before = client.get("/admin/jobs").json()["jobs"]
        for path, says in (
            (NUL_PATH, "control character"),
            (LONG_COMPONENT, "over 255 bytes"),
            (str(project) + "/" + "b" * 256, "over 255 bytes"),
        ):
            r = client.post("/admin/jobs", json={"path": path, "project": "demo"})
            assert r.status_code == 400, (path[:40], r.status_code, r.text[:300])
            detail = r.json()["detail"]
            assert any(says in p for p in detail["problems"]), detail
            assert "\x00" not in r.text and "a" * 300 not in r.text  # the input is never echoed
        # Wrong types are refused, not coerced: a number for a path, a string for a flag.
        for body in (
            {"path": 7, "project": "demo"},
            {"path": str(project), "project": "demo", "full": "yes"},
            {"path": str(project), "project": ["demo"]},
            {"path": [str(project)], "project": "demo"},
        ):
            r = client.post("/admin/jobs", json=body)
            assert r.status_code == 400, (body, r.text)
        r = client.post("/admin/jobs", json={"path": str(project), "project": "demo\x00x"})
        assert r.status_code == 400 and "invalid project name" in r.text, r.text
        assert client.get("/admin/jobs").json()["jobs"] == before  # nothing started


def test_every_route_answers_hostile_path_and_query_values_with_4xx(server):
    """Each route of the schema, with each path parameter set to a hostile string (NUL, over-long,
    non-ASCII, traversal) and each query parameter too: never a 5xx."""
    from urllib.parse import quote

    url, _ = server
    paths = _schema()["paths"]
    seen = 0
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as client:
        for template, operations in paths.items():
            for method, op in operations.items():
                if (
                    method not in ("get", "post", "put", "delete")
                    or template == "/admin/projects/{project}"
                    and method == "delete"
                ):
                    continue
                params = op.get("parameters", [])
                in_path = [p["name"] for p in params if p["in"] == "path"]
                in_query = [p["name"] for p in params if p["in"] == "query"]
                if not in_path and not in_query:
                    continue
                for hostile in HOSTILE_STRINGS:
                    target = template
                    for name in in_path:
                        target = target.replace("{" + name + "}", quote(hostile, safe=""))
                    query = {name: hostile for name in in_query}
                    r = client.request(
                        method.upper(), target, params=query, json={} if method in ("post", "put") else None
                    )
                    seen += 1
                    assert r.status_code < 500, (method, template, hostile[:20], r.status_code, r.text[:300])
                    assert "\x00" not in r.text, (method, template)
    assert seen > 40
