"""`fathom index`, `fathom search` and `fathom mcp` answer with torch made unimportable.

Each runs as a real child process whose `sitecustomize` puts a finder first on `sys.meta_path`
that refuses torch, sentence-transformers and transformers, and writes every refused import to a
file: a command that needed one of them fails, and one that merely tried is caught by the list.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.index.retrieval_fixtures import write_project

BLOCKED = ("torch", "sentence_transformers", "transformers")
SHIM = textwrap.dedent('''
    import os, sys

    class _NoTorch:
        """Refuses the torch stack, and notes each import of it. A probe through
        `importlib.util.find_spec` (LanceDB asks whether torch is installed) is refused the
        same way but not noted: it imports nothing."""

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] not in BLOCKED:
                return None
            frame, probe = sys._getframe(1), False
            while frame is not None and not probe:
                probe = frame.f_code.co_filename == "<frozen importlib.util>"
                frame = frame.f_back
            if not probe:
                with open(os.environ["NO_TORCH_LOG"], "a") as log:
                    log.write(name + "\\n")
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)

    sys.meta_path.insert(0, _NoTorch())
''').replace("BLOCKED:", f"{BLOCKED!r}:")


@pytest.fixture
def no_torch_env(tmp_path: Path) -> dict[str, str]:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SHIM)
    src = Path(__file__).resolve().parents[1] / "src"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FATHOM_")}
    return env | {
        "PYTHONPATH": os.pathsep.join([str(shim), str(src)]),
        "NO_TORCH_LOG": str(tmp_path / "refused.txt"),
        "FATHOM_DATA_DIR": str(tmp_path / "data"),
        "FATHOM_WATCH": "0",
        "COLUMNS": "200",
        "HF_HUB_OFFLINE": "1",
    }


def _fathom(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "fathom", *args], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, f"fathom {' '.join(args)}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    return proc.stdout


def _refused(env: dict[str, str]) -> list[str]:
    log = Path(env["NO_TORCH_LOG"])
    return log.read_text().split() if log.exists() else []


def test_the_shim_blocks_torch(no_torch_env):
    proc = subprocess.run(
        [sys.executable, "-c", "import torch"], capture_output=True, text=True, env=no_torch_env, timeout=60
    )
    assert proc.returncode != 0 and "blocked by the test" in proc.stderr
    assert _refused(no_torch_env) == ["torch"]


@pytest.mark.slow
async def test_index_search_and_mcp_answer_without_torch(tmp_path, no_torch_env):
    root = write_project(tmp_path / "shop")
    _fathom(no_torch_env, "index", str(root), "--project", "shop")
    found = _fathom(no_torch_env, "search", "hash a password", "--project", "shop", "-k", "1")
    assert "password.py" in found
    assert _refused(no_torch_env) == []

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "fathom", "mcp", "--in-process"], env=no_torch_env
    )
    async with asyncio.timeout(240):
        async with Client(params, read_timeout_seconds=180) as client:
            result = await client.call_tool("search_code", {"query": "hash a password", "k": 3})
            assert not result.is_error, result.content
            assert result.structured_content["results"][0]["path"] == "auth/password.py"
    assert _refused(no_torch_env) == []


def test_the_cli_starts_without_the_search_stack_or_the_fleet_agent():
    # Every `fathom …` pays for what `import fathom.cli` loads; a search answered by a running
    # server needs none of these, so none may load before a command asks for it.
    heavy = (
        "numpy",
        "onnxruntime",
        "lancedb",
        "torch",
        "fathom.service",
        "fathom.index.search",
        "fathom.fleet.agent",
        "fathom.fleet.protocol",
        "fathom.agents.rlm",
    )
    code = f"import sys, fathom.cli; print([m for m in {heavy!r} if m in sys.modules])"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert loaded.stdout.strip() == "[]", loaded.stdout


def test_the_store_package_opens_no_database_engine_until_a_table_is_opened():
    # The store's modules are imported by every search and index path, and by tools that never
    # open a table (verify's listing, the dashboard's project names): LanceDB and the
    # PostgreSQL driver load only when a store first opens one.
    code = "import sys, fathom.index.store; print([m for m in ('lancedb', 'psycopg') if m in sys.modules])"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert loaded.stdout.strip() == "[]", loaded.stdout
