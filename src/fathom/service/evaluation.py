"""`fathom eval`: search quality on the user's own code, with no labels.

What it owns: one evaluation of a project folder. Its indexable files are copied into a
temporary folder with every Python docstring blanked (`fathom.index.eval_sets`), the copy is
indexed into a temporary data dir by the settings' local encoder (so the user's indexes are
never touched, and the docstring questions cannot be answered by their own words), and each
question set is asked three ways, one question at a time:

* **vector**: the store's cosine top 10 (the query's encoding included in its latency);
* **keyword**: the store's full-text top 10;
* **fused**: the search as `fathom search` runs it (both halves fused by the query's shape,
  `fathom.index.fusion`, ranked by what each file is, `fathom.index.ranking`, one result per
  file: a result answers when its lines or its file's other matching ranges hold the answer).

Per set and mode: MRR@10, hit@1, hit@3, hit@10, the right file in the top 3 files (files in
the order of their best hit, and by the file score `fathom.index.results.files_of` gives with
`FILE_SUPPORT_MEASURED`), and latency p50/p95. The index's encoding rate (chunks/s) is
reported too.

What it refuses to do: write into the user's data dir, or run on a folder the index itself
would refuse (the same check as `fathom index`).

API:
    await evaluate(settings, root, *, sets=SETS, questions=None, limit=200,
                   progress=None) -> EvalReport
"""

from __future__ import annotations

import asyncio
import math
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fathom.config import Settings
from fathom.errors import ConfigError
from fathom.index import search as search_mod
from fathom.index.eval_sets import (
    SETS,
    EvalQuery,
    docstring_queries,
    identifier_queries,
    read_questions,
    strip_docstrings,
)
from fathom.index.indexer import check_project_root
from fathom.index.request import SearchRequest
from fathom.index.results import SearchHit, files_of
from fathom.index.store import Hit
from fathom.index.walker import walk
from fathom.inference.model_choice import with_chosen_models

if TYPE_CHECKING:
    from fathom.service import Fathom

K = 10
MODES = ("vector", "keyword", "fused")
PROJECT = "eval"
# The file-score weight measured beside files in best-hit order (0).
FILE_SUPPORT_MEASURED = 0.5


@dataclass(frozen=True)
class ModeFigures:
    mode: str
    mrr: float
    hit1: float
    hit3: float
    hit10: float
    file3: float  # the right file among the first 3 files, files in best-hit order
    file3_scored: float  # the same, files ordered by file score (FILE_SUPPORT_MEASURED)
    p50_ms: float
    p95_ms: float


@dataclass(frozen=True)
class SetFigures:
    name: str
    queries: int
    modes: list[ModeFigures]


@dataclass(frozen=True)
class EvalReport:
    project: str
    model: str
    files: int
    chunks: int  # code chunks searched
    embedded: int  # chunks the encoder embedded (code and docs)
    index_s: float
    chunks_per_s: float  # the embedding phase's rate
    sets: list[SetFigures] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(values: Sequence[float], pct: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(pct / 100 * len(ordered)) - 1))]


def rank_of(query: EvalQuery, hits: Sequence[Any]) -> int | None:
    """1-based place of the first of the top K hits that answers `query`, or None."""
    for i, h in enumerate(hits[:K], start=1):
        ranges = [(h.start_line, h.end_line), *((a, b) for a, b, *_ in getattr(h, "others", ()))]
        if any(query.answered_by(h.path, a, b) for a, b in ranges):
            return i
    return None


def file_rank(query: EvalQuery, hits: Sequence[Any], support: float) -> int | None:
    for i, f in enumerate(files_of(hits[:K], support=support), start=1):
        if f.path in query.paths:
            return i
    return None


def figures(
    mode: str, ranks: list[int | None], files: list[int | None], scored: list[int | None], ms: list[float]
) -> ModeFigures:
    n = max(1, len(ranks))

    def share(rs: list[int | None], top: int) -> float:
        return round(sum(1 for r in rs if r is not None and r <= top) / n, 4)

    mrr = round(sum(1.0 / r for r in ranks if r) / n, 4)
    return ModeFigures(
        mode,
        mrr,
        share(ranks, 1),
        share(ranks, 3),
        share(ranks, K),
        share(files, 3),
        share(scored, 3),
        round(percentile(ms, 50), 1),
        round(percentile(ms, 95), 1),
    )


def copy_stripped(root: Path, dest: Path) -> tuple[dict[str, str], dict[str, list[Any]]]:
    """Write the project's indexable files under `dest`, Python docstrings blanked; return the
    sources as the copy holds them and each file's documented definitions."""
    sources: dict[str, str] = {}
    documented: dict[str, list[Any]] = {}
    for f in walk(root):
        text = f.text
        if f.path.endswith((".py", ".pyi")):
            text, documented[f.path] = strip_docstrings(text)
        out = dest / f.path
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        sources[f.path] = text
    return sources, documented


async def _ask(fathom: Fathom, queries: list[EvalQuery]) -> list[ModeFigures]:
    store = fathom.store
    encoder = fathom.encoder_for("code", PROJECT)
    ranks: dict[str, list[int | None]] = {m: [] for m in MODES}
    files: dict[str, list[int | None]] = {m: [] for m in MODES}
    scored: dict[str, list[int | None]] = {m: [] for m in MODES}
    ms: dict[str, list[float]] = {m: [] for m in MODES}
    for q in queries:
        t0 = time.perf_counter()
        vector = await search_mod.encode_query(encoder, q.text)
        encode_ms = (time.perf_counter() - t0) * 1000
        for mode in MODES:
            t0 = time.perf_counter()
            hits: Sequence[Hit] | Sequence[SearchHit]  # a store's own hits, or the ranked search's
            if mode == "vector":
                hits = await asyncio.to_thread(store.vector_search, PROJECT, "code", vector, K)
            elif mode == "keyword":
                hits = await asyncio.to_thread(store.text_search, PROJECT, "code", q.text, K)
            else:  # encodes the query itself
                hits = await search_mod.retrieve(fathom, SearchRequest(q.text, PROJECT, "code", K))
            took = (time.perf_counter() - t0) * 1000
            ms[mode].append(took + (encode_ms if mode == "vector" else 0.0))
            ranks[mode].append(rank_of(q, hits))
            files[mode].append(file_rank(q, hits, 0.0))
            scored[mode].append(file_rank(q, hits, FILE_SUPPORT_MEASURED))
    return [figures(m, ranks[m], files[m], scored[m], ms[m]) for m in MODES]


async def evaluate(
    settings: Settings,
    root: Path,
    *,
    sets: Sequence[str] = SETS,
    questions: Path | None = None,
    limit: int | None = 200,
    progress: Callable[[str], None] | None = None,
) -> EvalReport:
    """Index a docstring-free copy of `root` in a temporary data dir and ask each set."""
    from fathom.service import Fathom  # the facade this module serves; imported late

    unknown = sorted(set(sets) - set(SETS))
    if unknown or not sets:
        raise ConfigError(f"unknown question set(s) {unknown or sets}: choose from {', '.join(SETS)}")
    if "questions" in sets and questions is None:
        if list(sets) == ["questions"]:
            raise ConfigError(
                "the questions set needs --questions FILE (a JSON or YAML list of {question, file} entries)"
            )
        sets = [s for s in sets if s != "questions"]
    if questions is not None and "questions" not in sets:
        sets = [*sets, "questions"]
    say = progress or (lambda _: None)
    real = check_project_root(Path(root).expanduser(), settings.refused_roots)
    with tempfile.TemporaryDirectory(prefix="fathom-eval-") as tmp:
        copy = Path(tmp) / real.name
        say(f"copying {real} without its docstrings")
        sources, documented = await asyncio.to_thread(copy_stripped, real, copy)
        asked: dict[str, list[EvalQuery]] = {}
        if "docstring" in sets:
            asked["docstring"] = docstring_queries(documented, limit)
        if "identifier" in sets:
            asked["identifier"] = identifier_queries(sources, limit)
        if questions is not None:
            asked["questions"] = read_questions(Path(questions), sources)
        # The model `fathom models use` chose in the user's data dir, carried over: the
        # temporary data dir has no models.json of its own.
        eval_settings = with_chosen_models(settings).model_copy(
            update={"data_dir": Path(tmp) / "data", "store_url": None, "watch": False}
        )
        fathom = Fathom(eval_settings)
        try:
            say(f"indexing {len(sources)} files with {fathom.encoder.id}")
            t0 = time.perf_counter()
            indexed = await fathom.index(copy, PROJECT, full=True)
            index_s = time.perf_counter() - t0
            report = EvalReport(
                str(real),
                fathom.encoder.id,
                len(sources),
                indexed.tables.get("code", 0),
                indexed.embedded,
                round(index_s, 2),
                round(indexed.rate, 1),
            )
            for name, queries in asked.items():
                say(f"asking {len(queries)} {name} questions")
                modes = await _ask(fathom, queries) if queries else []
                report.sets.append(SetFigures(name, len(queries), modes))
        finally:
            await fathom.aclose()
    return report
