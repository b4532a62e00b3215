"""What models this install can run in-process, offline: `fathom models`.

It owns finding them and describing them: the model folders that installed Python packages
ship (a folder with a `config.json` beside its weights, found through each distribution's
file list, nothing imported), the folders chosen with `fathom models use` (`models.json`), and
the folder the settings name. Each entry says its role (an embedding model, or a
cross-encoder for the reranker role, told apart by the architecture its config names), its
width, its token window, its size on disk, the runtime that would serve it here, and whether
it is in use. `measure` loads one and times it on this machine's cores: milliseconds per
embedded chunk and per query for an encoder, milliseconds to rerank 20 candidates for a
cross-encoder (the reranker stage's budget is 150 ms at the median on 2 cores,
docs/benchmarks.md).

It downloads only a model asked for by its Hub name (`fathom models use embed ORG/NAME`,
through `hub`); listing and measuring read what is on disk. It refuses to call a folder an
embedding model when its config names a classifier head (that folder scores pairs).
"""

from __future__ import annotations

import importlib.metadata
import json
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from fathom.config import Settings
from fathom.errors import ConfigError, FathomError
from fathom.inference.hub import HUB_NAME
from fathom.inference.model_choice import (
    EmbedModel,
    default_model,
    load_choice,
    settings_model,
    with_chosen_models,
    with_model,
)

Role = Literal["embed", "reranker"]
WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.onnx")
# Folder names too generic to name a model by: the package's name is used instead.
GENERIC = {"model", "models", "weights", "data", "files", "onnx", "input"}
RERANK_CANDIDATES = 20  # what the reranker stage reads, and what `measure` times


class UnknownModel(ConfigError):
    """A name that is neither a catalogue entry nor a model folder."""

    def __init__(self, name: str, role: Role, known: Sequence[str]):
        self.name, self.role = name, role
        listed = ", ".join(known) or "none is installed"
        super().__init__(
            f"no {role} model {name!r} here: give a name `fathom models` lists "
            f"({listed}) or the path of a model folder"
        )


@dataclass(frozen=True)
class Entry:
    """One model this install can run."""

    role: Role
    name: str
    path: str
    source: str  # "package NAME", "chosen folder", "settings"
    width: int | None  # embedding width; None for a cross-encoder
    max_tokens: int | None
    size_bytes: int
    in_use: bool = False
    cost: dict[str, float] = field(default_factory=dict)  # filled by `measure`

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def embed_model(self) -> EmbedModel:
        if self.width is None:
            raise ConfigError(
                f"{self.name} is a cross-encoder: it scores pairs and has no "
                f"vector space; use it with `fathom models use reranker`"
            )
        return EmbedModel(self.name, self.path, self.width)


# ---------------------------------------------------------------------------- reading a folder


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def is_model_folder(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any((folder / w).is_file() for w in WEIGHTS)


def role_of(folder: Path) -> Role:
    config = _json(folder / "config.json") or {}
    archs = config.get("architectures") or [] if isinstance(config, dict) else []
    if any(str(a).endswith("ForSequenceClassification") for a in archs):
        return "reranker"
    return "embed"


def width_of(folder: Path) -> int | None:
    """The width of the vectors the folder's sentence-transformers pipeline writes: a Dense
    module's output when it has one, else the transformer's hidden size."""
    for module in _json(folder / "modules.json") or []:
        if isinstance(module, dict) and str(module.get("type", "")).endswith("Dense"):
            dense = _json(folder / str(module.get("path", "")) / "config.json") or {}
            if isinstance(dense.get("out_features"), int):
                return int(dense["out_features"])
    config = _json(folder / "config.json") or {}
    for key in ("hidden_size", "d_model", "dim"):
        if isinstance(config.get(key), int):
            return int(config[key])
    return None


def max_tokens_of(folder: Path) -> int | None:
    st = _json(folder / "sentence_bert_config.json") or {}
    if isinstance(st.get("max_seq_length"), int):
        return int(st["max_seq_length"])
    config = _json(folder / "config.json") or {}
    value = config.get("max_position_embeddings")
    return int(value) if isinstance(value, int) else None


def size_of(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def entry_of(folder: Path, *, name: str, source: str) -> Entry:
    role = role_of(folder)
    return Entry(
        role=role,
        name=name,
        path=str(folder),
        source=source,
        width=width_of(folder) if role == "embed" else None,
        max_tokens=max_tokens_of(folder),
        size_bytes=size_of(folder),
    )


def check_embed_folder(folder: Path) -> int:
    """A folder's width, or a typed refusal naming what is wrong with it as an encoder."""
    if role_of(folder) == "reranker":
        raise ConfigError(
            f"{folder} is a cross-encoder: it scores pairs and has no vector "
            f"space; use it with `fathom models use reranker {folder}`"
        )
    width = width_of(folder)
    if width is None:
        raise ConfigError(f"the width of {folder} is unknown (its config names no hidden size)")
    return width


# ---------------------------------------------------------------------------- finding them


def package_folders() -> Iterator[tuple[str, Path]]:
    """(distribution name, model folder) for every model folder an installed package ships."""
    seen: set[Path] = set()
    for dist in importlib.metadata.distributions():
        for file in dist.files or ():
            if file.name != "config.json":
                continue
            folder = Path(str(dist.locate_file(file))).parent
            if folder not in seen and is_model_folder(folder):
                seen.add(folder)
                yield dist.metadata["Name"], folder


def _package_name(dist: str, folder: Path, default: EmbedModel) -> str:
    if folder.resolve() == Path(default.path).resolve():
        return default.name
    return dist.lower() if folder.name.lower() in GENERIC else folder.name.lower()


def catalogue(settings: Settings) -> list[Entry]:
    """Every model this install can run, the ones in use marked, embedding models first."""
    applied = with_chosen_models(settings)
    current = settings_model(applied)
    choice = load_choice(settings.data_dir)
    default = default_model()
    found: dict[str, Entry] = {}

    def add(folder: Path, name: str, source: str) -> None:
        key = str(folder.resolve())
        if key not in found and is_model_folder(folder):
            found[key] = entry_of(folder, name=name, source=source)

    for dist, folder in package_folders():
        add(folder, _package_name(dist, folder, default), f"package {dist}")
    for model in (*([choice.embed] if choice.embed else []), *choice.known):
        add(Path(model.path), model.name, "chosen folder")
    add(Path(current.path), current.name, "settings")
    if choice.reranker is not None:
        add(Path(choice.reranker.path), choice.reranker.name, "chosen folder")
    in_use = {str(Path(current.path).resolve())}
    if choice.reranker is not None:
        in_use.add(str(Path(choice.reranker.path).resolve()))
    entries = [replace(e, in_use=key in in_use) for key, e in found.items()]
    return sorted(entries, key=lambda e: (e.role != "embed", not e.in_use, e.name))


def resolve(settings: Settings, role: Role, name: str, *, as_name: str | None = None) -> Entry:
    """The entry `name` means for `role`: a catalogue name, or a model folder's path."""
    entries = catalogue(settings)
    for e in entries:
        package = e.source.removeprefix("package ") if e.source.startswith("package ") else None
        if e.role == role and name.lower() in (e.name.lower(), (package or "").lower()):
            return replace(e, name=as_name or e.name)
    folder = Path(name).expanduser()
    if folder.is_dir():
        folder = folder.resolve()
        if not is_model_folder(folder):
            raise ConfigError(
                f"{folder} is not a model folder (it needs a config.json beside "
                f"model.safetensors or pytorch_model.bin)"
            )
        if role == "embed":
            check_embed_folder(folder)
        else:
            from fathom.inference.cross_encoder import check_cross_encoder

            check_cross_encoder(str(folder))
        return entry_of(folder, name=as_name or folder.name.lower(), source="chosen folder")
    if HUB_NAME.fullmatch(name):
        return _from_hub(settings, role, name, as_name)
    raise UnknownModel(name, role, [e.name for e in entries if e.role == role])


def _from_hub(settings: Settings, role: Role, name: str, as_name: str | None) -> Entry:
    """A Hub model by its name: downloaded (the default at its pinned revision, any other at
    the commit `main` is now, each file checked) into the model cache, then checked as a folder."""
    from fathom.inference.hub import hub_model
    from fathom.inference.weights import is_default_ref, model_cache_dir, model_folder

    cache = model_cache_dir(settings)
    folder = model_folder(name, cache) if is_default_ref(name) else hub_model(name, cache)
    if role == "embed":
        check_embed_folder(folder)
    else:
        from fathom.inference.cross_encoder import check_cross_encoder

        check_cross_encoder(str(folder))
    return entry_of(folder, name=as_name or name.lower(), source=f"Hub {name}@{folder.name[:12]}")


# ---------------------------------------------------------------------------- measuring


def sample_texts(n: int = 32, size: int = 1000) -> list[str]:
    """Real code to time an encoder on: pieces of this package's own modules."""
    texts: list[str] = []
    for path in sorted(Path(__file__).resolve().parents[1].rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        texts.extend(text[i : i + size] for i in range(0, len(text) - size, size))
        if len(texts) >= n:
            break
    return texts[:n]


QUERIES = (
    "where is the retry delay computed",
    "parse a config file into settings",
    "check the token before serving a request",
    "split a file into chunks",
    "how is the vector table promoted",
)


def measure(entry: Entry, settings: Settings, *, clock: Callable[[], float] = time.perf_counter) -> Entry:
    """The entry with its cost on this machine: load seconds, and ms per chunk and per query
    (an encoder) or ms to rerank 20 candidates (a cross-encoder), medians of a few runs."""
    try:
        if entry.role == "embed":
            return replace(entry, cost=_embed_cost(entry, settings, clock))
        return replace(entry, cost=_rerank_cost(entry, settings, clock))
    except FathomError as exc:
        return replace(entry, cost={"error": 1.0}, source=f"{entry.source}; not measured: {exc}")


def _embed_cost(entry: Entry, settings: Settings, clock: Callable[[], float]) -> dict[str, float]:
    from fathom.inference.encoders import local_encoder

    encoder: Any = local_encoder(with_model(settings, entry.embed_model()))
    t0 = clock()
    encoder.load()
    loaded = clock() - t0
    texts = sample_texts()
    encoder.encode_sync(texts[:4])  # warm
    runs = []
    for _ in range(2):
        t = clock()
        encoder.encode_sync(texts)
        runs.append((clock() - t) * 1000 / len(texts))
    queries = []
    for q in QUERIES * 2:
        t = clock()
        encoder.encode_sync([q])
        queries.append((clock() - t) * 1000)
    return {
        "load_s": round(loaded, 2),
        "ms_per_chunk": round(statistics.median(runs), 2),
        "ms_per_query": round(statistics.median(queries), 2),
    }


def _rerank_cost(entry: Entry, settings: Settings, clock: Callable[[], float]) -> dict[str, float]:
    from fathom.inference.cross_encoder import CrossEncoderReranker

    reranker = CrossEncoderReranker(entry.path, model_name=entry.name, device=settings.local_device)
    t0 = clock()
    reranker.load()
    loaded = clock() - t0
    docs = sample_texts(RERANK_CANDIDATES)
    reranker.score_sync(QUERIES[0], docs[:2])  # warm
    runs = []
    for q in QUERIES:
        t = clock()
        reranker.score_sync(q, docs)
        runs.append((clock() - t) * 1000)
    return {"load_s": round(loaded, 2), f"ms_rerank_{RERANK_CANDIDATES}": round(statistics.median(runs), 2)}
