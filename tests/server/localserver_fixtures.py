"""The scripted local LLM server as pytest fixtures: a separate process on 127.0.0.1.

    async def test_something(local_llm):
        local_llm.control.script([{"tool_calls": [{"name": "grep", "arguments": {"pattern": "x"}}]}])
        backend = OpenAICompatibleChat(local_llm.base_url, roles=[Role.RLM], model=local_llm.model)

`local_llm_server` (session scope) starts `python -m fathom.devtools.localserver` once and stops
it by its own pid at the end; `local_llm` (function scope) resets its script, faults, delay and
counters before and after each test.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fathom.devtools.localserver import LocalServerControl
from tests.fleet.fleet_fixtures import PY, ProcessGroup, free_port, wait_http

MODEL = "qwen2.5-coder-local"


@dataclass
class LocalLLM:
    root_url: str  # http://127.0.0.1:PORT
    base_url: str  # …/v1: what FATHOM_LOCAL_CHAT_URL and `--serve …=openai-compatible:` take
    model: str
    control: LocalServerControl


def spawn_local_llm(
    group: ProcessGroup, port: int, *, model: str = MODEL, extra: tuple[str, ...] = ()
) -> LocalLLM:
    proc = group.spawn(
        f"localserver-{port}",
        [PY, "-m", "fathom.devtools.localserver", "--port", str(port), "--model", model, *extra],
    )
    root = f"http://127.0.0.1:{port}"
    wait_http(root + "/v1/models", proc=proc, timeout=60)
    return LocalLLM(root, root + "/v1", model, LocalServerControl(root))


@pytest.fixture(scope="session")
def local_llm_server(tmp_path_factory) -> Iterator[LocalLLM]:
    group = ProcessGroup(Path(tmp_path_factory.mktemp("localserver")))
    try:
        llm = spawn_local_llm(group, free_port())
        yield llm
        llm.control.close()
    finally:
        group.stop()


@pytest.fixture
def local_llm(local_llm_server: LocalLLM) -> Iterator[LocalLLM]:
    local_llm_server.control.reset()
    yield local_llm_server
    local_llm_server.control.reset()
