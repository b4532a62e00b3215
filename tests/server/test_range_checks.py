"""Every numeric argument of an MCP tool or an admin API request is range-checked, with an error
naming the argument, its bounds and what was given; the server goes on serving.

Through the real server: the MCP tools over streamable HTTP at `/mcp`, and the admin API, on a
small project indexed by a job.
"""

from __future__ import annotations

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.fleet.fleet_fixtures import ADMIN
from tests.server.admin_fixtures import Operator, make_project

BIG = 2**31


async def indexed(operator: Operator) -> None:
    root = make_project(operator.tmp / "demo")
    async with operator.client() as admin:
        job = (await admin.post("/admin/jobs", json={"path": str(root), "project": "demo"})).json()
        done = await operator.wait_job(admin, job["id"])
        assert done["state"] == "done", done


async def test_mcp_numeric_arguments_out_of_range_get_a_clear_error(operator: Operator):
    await indexed(operator)
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60)
    async with http, Client(streamable_http_client(f"{operator.url}/mcp", http_client=http)) as client:
        cases = [
            ("find_similar", {"project": "demo", "path": "app.py", "line": BIG}, "line"),
            ("find_similar", {"project": "demo", "path": "app.py", "line": 2**63 + 5}, "line"),
            ("find_similar", {"project": "demo", "path": "app.py", "line": 0}, "line"),
            ("find_similar", {"project": "demo", "path": "app.py", "line": -3}, "line"),
            ("find_similar", {"project": "demo", "snippet": "add", "k": BIG}, "k"),
            ("search_code", {"query": "add", "k": 0}, "k"),
            ("search_code", {"query": "add", "k": BIG}, "k"),
            ("search_docs", {"query": "usage", "k": -1}, "k"),
            ("explore", {"question": "what does add do?", "project": "demo", "max_steps": BIG}, "max_steps"),
            ("explore", {"question": "what does add do?", "project": "demo", "max_depth": 99}, "max_depth"),
            ("explore", {"question": "what does add do?", "project": "demo", "max_steps": 0}, "max_steps"),
        ]
        for tool, args, name in cases:
            res = await client.call_tool(tool, args)
            text = res.content[0].text
            assert res.is_error, (tool, args)
            # A ToolError's message, naming the argument and its bounds (not the SDK's generic
            # "Error executing tool X" of a crash).
            assert f"{name} must be" in text and "from" in text, (tool, args, text)
        # Within range, the same tools answer.
        ok = await client.call_tool("find_similar", {"project": "demo", "path": "app.py", "line": 2})
        assert not ok.is_error, ok.content[0].text
        past_the_end = await client.call_tool(
            "find_similar", {"project": "demo", "path": "app.py", "line": BIG - 1}
        )
        assert past_the_end.is_error and "no indexed code chunk" in past_the_end.content[0].text


@pytest.mark.parametrize(
    "method,path,body,needle",
    [
        ("PUT", "/admin/budget", {"override": BIG}, "override"),
        ("PUT", "/admin/budget", {"override": 2**70}, "override"),
        ("PUT", "/admin/budget", {"override": 0}, "override"),
        ("PUT", "/admin/policies", {"code-embedding": {"width": BIG}}, "width"),
        ("PUT", "/admin/policies", {"code-embedding": {"width": -1}}, "width"),
        ("POST", "/admin/fleet/probe", {"provider": "x", "texts": []}, "texts"),
    ],
)
async def test_admin_numeric_arguments_out_of_range_get_a_clear_400(
    operator: Operator, method: str, path: str, body: dict, needle: str
):
    async with operator.client() as admin:
        r = await admin.request(method, path, json=body)
        assert r.status_code == 400, r.text
        detail = r.json()["detail"]
        text = (
            detail if isinstance(detail, str) else " ".join([detail["message"], *detail.get("problems", [])])
        )
        assert needle in text, text
        assert (await admin.get("/admin/budget")).status_code == 200
