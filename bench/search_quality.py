"""Search quality on real code and real queries: vector-only, keyword-only and Fathom's search
as shipped, side by side in one run.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/search_quality.py            # ~6-9 min on 2 cores
    .venv/bin/python bench/search_quality.py --quick                      # ~2-3 min
    .venv/bin/python bench/search_quality.py --quick --sets natural,rich  # only these sets
    .venv/bin/python bench/search_quality.py --fusions                    # + the fusion rules considered
    .venv/bin/python bench/search_quality.py --headers                    # + chunks embedded with a header
    .venv/bin/python bench/search_quality.py --models default,PATH        # each model on every set

Four query sets over three indexed projects (`--sets` picks some):

* **docstring** (CodeSearchNet's method): every function or method with a docstring in a dozen
  installed libraries (no tests, no dunder methods, at least 2 lines of code after the
  docstring, a first sentence of at least 3 words, no duplicate query or body), over 2,000 of
  them. The query is the docstring's first sentence; the target is the function with its
  docstring removed, written into a corpus of files that mirrors each library's modules (one
  file per module, functions one after another, methods dedented to the top level as
  CodeSearchNet stores them). Every function of the corpus stays in the index as a
  distractor; `--queries` of them are asked (default 600, evenly spread).
* **natural**: hand-written web-search-style questions (CoSQA's kind: the asker's words, no
  identifier) over the same corpus (`bench/quality_queries.py`). Here the keyword half is
  weak and the vector half strong: the case where equal-weight rank fusion lost to the vector
  half alone.
* **identifier**: hand-written identifier-style queries (`bench/quality_queries.py`) over the
  real sources of httpx and click as installed, each aimed at one definition.
* **rich**: hand-written natural-language questions over the real sources of `rich` as
  installed (`RICH_QUESTIONS`, at least 40, written by reading its modules), each answered by
  a file: any chunk of the expected file is a hit (the question an agent asks before opening
  a file).

Each query is answered three ways, one at a time: the store's vector top-10 (the query encoded
by the same MiniLM; its latency includes that encoding), the store's keyword top-10
(full-text), and `search_code` over an in-process MCP session (what an agent gets: hybrid
retrieval, fusion, then the reranker stage, which finds no reranker here and keeps retrieval
order). A hit is the target when it is in the target's file and its line range holds the
target's `def`/`class` line (for the rich set: any chunk of the expected file). Printed per
set: MRR@10, hit@1, hit@3, hit@5 and latency p50/p95; per project, the encoder's rate
(chunks/s of the embedding phase); and, from `search_code`'s hits, how often the right file
is among the first three files, with files in best-hit order and by file score
(`fathom.index.results.files_of`, at each weight of `FILE_SUPPORTS`).

Only the code table is embedded (`search_code` never reads the docs table). `--fusions` also
prints the fusion rules considered, computed from the same depth-40 vector and keyword lists
the shipped search fuses (an exact comparison, not a re-run). `--headers`
indexes both corpora a second time with a path/symbol/signature header above each chunk's
text (by swapping `fathom.index.indexer.embedding_text` in this process) and measures them the
same way. `--store postgresql://…` runs on PostgreSQL + pgvector.

`--models` measures several embedding models in one run, one after the other on the same
sets and the same corpora, each in a data dir of its own: a catalogue name (`fathom models`
lists them; `default` is the default model) or a model folder's path. The run ends with one
table of every model on every set: `search_code`'s MRR@10 and hit@3, its latency p50/p95 and
the encoder's rate on each project.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import dataclasses
import functools
import importlib
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT / "src", ROOT):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench._common import machine, percentile, table  # noqa: E402
from bench.quality_queries import IDENTIFIER, NATURAL, RICH_QUESTIONS  # noqa: E402

from fathom.config import Settings  # noqa: E402
from fathom.errors import FathomError  # noqa: E402
from fathom.index import fusion  # noqa: E402
from fathom.index import indexer as indexer_mod  # noqa: E402
from fathom.index.chunk import Chunk  # noqa: E402
from fathom.index.chunking import chunk_file  # noqa: E402
from fathom.index.results import files_of  # noqa: E402
from fathom.index.store import Hit  # noqa: E402
from fathom.inference.encoders import local_encoder  # noqa: E402
from fathom.service import Fathom  # noqa: E402

DOCSTRING_LIBS = (
    "rich",
    "werkzeug",
    "jinja2",
    "requests",
    "websockets",
    "packaging",
    "psycopg",
    "urllib3",
    "anyio",
    "attr",
    "markdown_it",
    "pygments",
    "tqdm",
)
IDENTIFIER_LIBS = ("httpx", "click")
K = 10
SETS = ("docstring", "natural", "identifier", "rich")
FILE_SUPPORTS = (0.0, 0.25, 0.5, 1.0)  # file-score weights measured (0: best-hit order)
DEPTH = 40  # what the hybrid search asks of each half (search_mod.hybrid_search's default)


# --------------------------------------------------------------------------- the query sets


@dataclass(frozen=True)
class Target:
    path: str  # relative to the project root
    line: int | None  # the def/class line (1-based); None: any chunk of the file


@dataclass(frozen=True)
class Query:
    text: str
    target: Target
    library: str


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def first_sentence(doc: str) -> str:
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    return _SENTENCE_END.split(paragraph)[0].rstrip(".").strip()


def _package_root(name: str) -> Path:
    return Path(importlib.import_module(name).__file__).parent  # type: ignore[arg-type]


def _is_test(rel: Path) -> bool:
    return any("test" in part.lower() for part in rel.parts)


def docstring_corpus(
    libs: Sequence[str], root: Path, limit: int | None
) -> tuple[list[Query], list[Query], list[str]]:
    """Write the corpus under `root` (one file per module); return the docstring queries (one
    per function), the NATURAL queries resolved to their targets, and NATURAL targets missing."""
    found: list[tuple[str, str, str, str, str]] = []  # (library, module, function, query, code)
    for lib in libs:
        base = _package_root(lib)
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base)
            if _is_test(rel):
                continue
            try:
                source = path.read_text(encoding="utf-8")
                tree = ast.parse(source)
            except (SyntaxError, UnicodeDecodeError):
                continue
            lines = source.splitlines()
            for node in ast.walk(tree):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                doc = ast.get_docstring(node)
                name = node.name
                if not doc or "test" in name.lower() or (name.startswith("__") and name.endswith("__")):
                    continue
                query = first_sentence(doc)
                if len(query.split()) < 3 or len(node.body) < 2:
                    continue
                doc_node = node.body[0]
                # The def line(s) up to the docstring, then everything after it: the docstring
                # is removed, the code is kept exactly.
                head = lines[node.lineno - 1 : doc_node.lineno - 1]
                body = lines[doc_node.end_lineno : node.end_lineno]  # type: ignore[misc]
                if sum(1 for line in body if line.strip()) < 2:
                    continue
                code = textwrap.dedent("\n".join(head + body))
                found.append((lib, f"{lib}/{rel.as_posix()}", name, query, code))
    # Duplicates are ambiguous (two targets for one query, or one body twice): drop them all.
    qcount: dict[str, int] = {}
    ccount: dict[str, int] = {}
    for *_, q, c in found:
        qcount[q.lower()] = qcount.get(q.lower(), 0) + 1
        ccount[c] = ccount.get(c, 0) + 1
    kept = [f for f in found if qcount[f[3].lower()] == 1 and ccount[f[4]] == 1]
    wanted = {(rel, name) for _, rel, name in NATURAL}
    if limit is not None:
        # An even spread across libraries, reproducible; NATURAL's targets always stay.
        step = max(1, len(kept) // limit)
        sample = set(range(0, len(kept), step)[:limit])
        kept = [f for i, f in enumerate(kept) if i in sample or (f[1], f[2]) in wanted]
    files: dict[str, list[str]] = {}
    queries, where = [], {}
    for lib, rel, name, query, code in kept:
        parts = files.setdefault(rel, [])
        target = Target(rel, sum(len(p.splitlines()) + 2 for p in parts) + 1)
        parts.append(code)
        queries.append(Query(query, target, lib))
        where.setdefault((rel, name), []).append(target)
    for rel, parts in files.items():
        out = root / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n\n\n".join(parts) + "\n", encoding="utf-8")
    natural, missing = [], []
    for text, rel, name in NATURAL:
        targets = where.get((rel, name), [])
        if len(targets) != 1:  # absent, or two functions of that name in one module
            missing.append(f"{rel}::{name}")
            continue
        natural.append(Query(text, targets[0], rel.split("/")[0]))
    return queries, natural, missing


def _definitions(tree: ast.AST) -> dict[str, int]:
    """Qualified name (Class.method) -> def/class line, first definition wins."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{scope}.{child.name}" if scope else child.name
                out.setdefault(name, child.lineno)
                visit(child, name)

    visit(tree, "")
    return out


def identifier_corpus(root: Path) -> tuple[list[Query], list[str]]:
    """Copy httpx's and click's sources under `root`; resolve each query's target line."""
    defs: dict[str, dict[str, int]] = {}
    for lib in IDENTIFIER_LIBS:
        base = _package_root(lib)
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base)
            out = root / lib / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out)
            defs[f"{lib}/{rel.as_posix()}"] = _definitions(ast.parse(path.read_text("utf-8")))
    queries, missing = [], []
    for lib, text, rel, symbol in IDENTIFIER:
        line = defs.get(f"{lib}/{rel}", {}).get(symbol)
        if line is None:
            missing.append(f"{lib}/{rel}::{symbol}")
            continue
        queries.append(Query(text, Target(f"{lib}/{rel}", line), lib))
    return queries, missing


# --------------------------------------------------------------------------- scoring


def rank_of(hits: Sequence[Any], target: Target) -> int | None:
    """1-based rank of the first hit holding the target's definition line (any hit in its
    file when it names no line), within the top K. A result per file holds the lines of its
    other matching ranges too (`also`): the answer points at them in its own place."""
    for i, h in enumerate(hits[:K], start=1):
        ranges = ((h.start_line, h.end_line), *getattr(h, "also", ()))
        if h.path == target.path and (target.line is None or any(a <= target.line <= b for a, b in ranges)):
            return i
    return None


def file_rank(hits: Sequence[Any], target: Target, support: float) -> int | None:
    """1-based place of the target's file among the files of the top K hits."""
    for i, f in enumerate(files_of(hits[:K], support=support), start=1):
        if f.path == target.path:
            return i
    return None


def rich_corpus(root: Path) -> tuple[list[Query], list[str]]:
    """Copy rich's sources under `root`; each RICH_QUESTIONS entry answered by its file."""
    base = _package_root("rich")
    for path in sorted(base.rglob("*.py")):
        out = root / "rich" / path.relative_to(base)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, out)
    queries, missing = [], []
    for text, rel in RICH_QUESTIONS:
        if not (base / rel).is_file():
            missing.append(f"rich/{rel}")
            continue
        queries.append(Query(text, Target(f"rich/{rel}", None), "rich"))
    return queries, missing


@dataclass
class Tally:
    ranks: list[int | None]
    ms: list[float]
    # support -> the target file's place among the files of each query's hits
    files: dict[float, list[int | None]] = dataclasses.field(default_factory=dict)

    def row(self, name: str) -> list[str]:
        n = len(self.ranks)
        mrr = sum(1.0 / r for r in self.ranks if r) / n
        hit1 = sum(1 for r in self.ranks if r == 1) / n
        hit3 = sum(1 for r in self.ranks if r and r <= 3) / n
        hit5 = sum(1 for r in self.ranks if r and r <= 5) / n
        lat = f"{percentile(self.ms, 50):.1f} / {percentile(self.ms, 95):.1f}" if self.ms else "-"
        return [name, f"{mrr:.3f}", f"{hit1:.3f}", f"{hit3:.3f}", f"{hit5:.3f}", lat]

    def file_hit3(self, support: float) -> float:
        ranks = self.files.get(support, [])
        return sum(1 for r in ranks if r and r <= 3) / max(1, len(ranks))

    @property
    def mrr(self) -> float:
        return sum(1.0 / r for r in self.ranks if r) / len(self.ranks)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t0) * 1000


# --------------------------------------------------------------------------- running


@dataclass
class Lists:
    """The depth-40 vector and keyword lists of one query (for --fusions)."""

    vector: list[Hit]
    text: list[Hit]


@dataclass
class _Shown:
    """A result as `search_code` returns it (only what scoring reads)."""

    path: str
    start_line: int
    end_line: int
    also: tuple[tuple[int, int], ...] = ()  # the file's other matching ranges (one per file)


async def evaluate(
    fathom: Fathom, encoder: Any, project: str, queries: list[Query], *, keep_lists: bool
) -> tuple[dict[str, Tally], list[Lists]]:
    """Each query three ways, one query at a time: vector only, keyword only, and
    `search_code` over an in-process MCP session (the shipped path)."""
    from mcp import Client

    from fathom.server.mcp_tools import build_mcp_server

    store = fathom.store
    tallies = {name: Tally([], []) for name in ("vector", "keyword", "shipped")}
    lists: list[Lists] = []
    depth = DEPTH if keep_lists else K
    store.vector_search(project, "code", encoder.encode_sync(["warm up"])[0], K)  # load the matrix
    async with Client(build_mcp_server(fathom)) as client:
        await client.call_tool("search_code", {"query": "warm up", "project": project, "k": K})
        for q in queries:
            vhits, vms = timed(
                lambda: store.vector_search(project, "code", encoder.encode_sync([q.text])[0], depth)
            )
            thits, tms = timed(lambda: store.text_search(project, "code", q.text, depth))
            t0 = time.perf_counter()
            res = await client.call_tool("search_code", {"query": q.text, "project": project, "k": K})
            sms = (time.perf_counter() - t0) * 1000
            if res.is_error:
                raise RuntimeError(f"search_code failed for {q.text!r}: {res.content}")
            shown = [
                _Shown(
                    r["path"],
                    r["start_line"],
                    r["end_line"],
                    tuple((a["start_line"], a["end_line"]) for a in r.get("also", ())),
                )
                for r in res.structured_content["results"]
            ]
            for name, hits, ms in (("vector", vhits, vms), ("keyword", thits, tms), ("shipped", shown, sms)):
                tallies[name].ranks.append(rank_of(hits, q.target))
                tallies[name].ms.append(ms)
                for support in FILE_SUPPORTS:
                    tallies[name].files.setdefault(support, []).append(file_rank(hits, q.target, support))
            if keep_lists:
                lists.append(Lists(vhits, thits))
    return tallies, lists


def _weighted_rrf(vector: Sequence[Hit], text: Sequence[Hit], query: str) -> list[Hit]:
    w = fusion.query_shape(query).keyword_weight
    score: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for weight, ranking in ((1 - w, vector), (w, text)):
        for rank, h in enumerate(ranking, start=1):
            score[h.chunk_id] = score.get(h.chunk_id, 0.0) + weight / (fusion.RRF_K + rank)
            first.setdefault(h.chunk_id, h)
    return sorted(first.values(), key=lambda h: -score[h.chunk_id])


def _convex(weight: float) -> Callable[[Sequence[Hit], Sequence[Hit], str], list[Hit]]:
    def rule(vector: Sequence[Hit], text: Sequence[Hit], query: str) -> list[Hit]:
        shape = fusion.query_shape(query)
        flat = fusion.QueryShape(shape.tokens, 0)  # no names, no paths: no boosts
        return _with_weight(weight, lambda: fusion.fuse(vector, text, query, shape=flat))

    return rule


def _with_weight(weight: float, call: Callable[[], list[Hit]]) -> list[Hit]:
    saved = fusion.NATURAL_WEIGHT
    fusion.NATURAL_WEIGHT = weight
    try:
        return call()
    finally:
        fusion.NATURAL_WEIGHT = saved


def _no_boosts(vector: Sequence[Hit], text: Sequence[Hit], query: str) -> list[Hit]:
    shape = fusion.query_shape(query)
    bare = fusion.QueryShape(shape.tokens, shape.code_tokens, frozenset(), shape.words, ())
    return fusion.fuse(vector, text, query, shape=bare)


# The rules considered, computed on the same depth-40 lists the shipped search fuses.
FUSION_RULES: dict[str, Callable[[Sequence[Hit], Sequence[Hit], str], list[Hit]]] = {
    "RRF, equal weights (k=60; the previous rule)": lambda v, t, q: fusion.rrf_fuse([v, t]),
    "RRF weighted by query shape": _weighted_rrf,
    "convex, keyword weight 0.2 for every query": _convex(0.2),
    "convex, keyword weight 0.4 for every query": _convex(0.4),
    "convex by query shape, no name/path boosts": _no_boosts,
    "convex by query shape + boosts (shipped)": lambda v, t, q: fusion.fuse(v, t, q),
}


def fusion_rows(queries: list[Query], lists: list[Lists]) -> list[list[str]]:
    rows = []
    for name, rule in FUSION_RULES.items():
        ranks = [
            rank_of(rule(lst.vector, lst.text, q.text), q.target)
            for q, lst in zip(queries, lists, strict=True)
        ]
        rows.append(Tally(ranks, []).row(name)[:5])
    return rows


def with_header(chunk: Chunk) -> str:
    """The alternative `--headers` measures: a line naming the chunk's path and symbol, and
    for a later window of a long definition its signature, above the chunk's text."""
    head = f"{chunk.path} {chunk.symbol}" if chunk.symbol else chunk.path
    signature = _SIGNATURES.get((chunk.path, chunk.symbol))
    if signature and not chunk.text.lstrip().startswith(signature.strip()):
        head += "\n" + signature
    return f"{head}\n{chunk.text}"


_SIGNATURES: dict[tuple[str, str | None], str] = {}


def _collect_signatures(root: Path) -> None:
    """The first line of each definition's first window, for `with_header`."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        chunks = sorted(chunk_file(rel, path.read_text("utf-8")), key=lambda c: c.start_line)
        for c in chunks:
            if c.table == "code" and c.symbol and (c.path, c.symbol) not in _SIGNATURES:
                _SIGNATURES[(c.path, c.symbol)] = next(
                    (line for line in c.text.splitlines() if line.strip()), ""
                )


def code_only(fathom: Fathom) -> None:
    """Index the code table only: `search_code` never reads the docs table (here, mostly
    httpx's and click's docstrings), and embedding it would cost a third of the identifier
    project's indexing time. The code table is built exactly as `fathom index` builds it."""
    build = fathom.indexer

    def indexer(**selection: Any) -> indexer_mod.Indexer:
        ix = build(**selection)
        ix.discover = functools.partial(_CodeOnly, *ix.discover.args, **ix.discover.keywords)
        return ix

    fathom.indexer = indexer  # type: ignore[method-assign]


class _CodeOnly(indexer_mod.Discovery):
    """The project's code chunks only, streamed like every index job's."""

    def __iter__(self):
        return (c for c in super().__iter__() if c.table == "code")


async def index(fathom: Fathom, root: Path, project: str) -> tuple[int, float, float]:
    """Chunks indexed, seconds, and the encoder's rate (chunks/s of the embedding phase)."""
    t0 = time.perf_counter()
    report = await fathom.index(root, project, full=True)
    return report.chunks, time.perf_counter() - t0, report.rate


def report(name: str, queries: list[Query], chunks: int, tallies: dict[str, Tally]) -> float:
    libs = sorted({q.library for q in queries})
    print(f"\n## {name}: {len(queries)} queries over {chunks} code chunks ({', '.join(libs)})")
    print(
        table(
            ["ranking", "MRR@10", "hit@1", "hit@3", "hit@5", "latency p50 / p95 ms"],
            [
                tallies[n].row(label)
                for n, label in (
                    ("vector", "vector only (the model's cosine; query encoding included)"),
                    ("keyword", "keyword only (full-text)"),
                    ("shipped", "Fathom search_code over MCP (as shipped)"),
                )
            ],
        )
    )
    best = max(tallies["vector"].mrr, tallies["keyword"].mrr)
    gain = tallies["shipped"].mrr - best
    print(f"shipped - better half: {gain:+.3f} MRR@10")
    print(
        "right file in the first 3 files (search_code's hits): "
        + ", ".join(
            f"{'best-hit order' if s == 0 else f'file score {s:g}'} {tallies['shipped'].file_hit3(s):.3f}"
            for s in FILE_SUPPORTS
        )
    )
    if len(libs) <= 3:  # the hand-written sets: each library's share of the shipped figure
        parts = []
        for lib in libs:
            ranks = [r for q, r in zip(queries, tallies["shipped"].ranks, strict=True) if q.library == lib]
            parts.append(f"{lib} {Tally(ranks, []).mrr:.3f} ({len(ranks)})")
        print("shipped MRR@10 by library: " + ", ".join(parts))
    return gain


@dataclass
class SetResult:
    """One set measured with one model: `search_code`'s tally and the encoder's rate."""

    name: str
    shipped: Tally
    rate: float


async def run_sets(
    fathom: Fathom,
    encoder: Any,
    work: Path,
    sets: list[tuple[str, str, list[Query]]],
    *,
    fusions: bool,
    suffix: str = "",
) -> list[SetResult]:
    chunks: dict[str, int] = {}
    rates: dict[str, float] = {}
    results: list[SetResult] = []
    for project in dict.fromkeys(p for _, p, _ in sets):
        n, secs, rate = await index(fathom, work / project, project + suffix)
        chunks[project], rates[project] = n, rate
        print(f"indexed {project}{suffix}: {n} chunks in {secs:.0f} s (encoded at {rate:.0f} chunks/s)")
    for name, project, queries in sets:
        code_chunks = fathom.store.table_info(project + suffix, "code").rows
        tallies, lists = await evaluate(fathom, encoder, project + suffix, queries, keep_lists=fusions)
        report(name + suffix, queries, code_chunks, tallies)
        results.append(SetResult(name + suffix, tallies["shipped"], rates[project]))
        if fusions:
            print(
                table(
                    ["fusion rule (same depth-40 lists)", "MRR@10", "hit@1", "hit@3", "hit@5"],
                    fusion_rows(queries, lists),
                )
            )
    return results


def model_settings(settings: Settings, name: str) -> Settings:
    """`settings` with the embedding model `name` (a catalogue name, `default`, or a folder)."""
    from fathom.inference.catalogue import resolve
    from fathom.inference.model_choice import EmbedModel, with_model

    if name == "default":
        return settings
    entry = resolve(settings, "embed", name)
    return with_model(settings, EmbedModel(entry.name, entry.path, entry.width))


def models_table(measured: list[tuple[str, list[SetResult]]]) -> str:
    rows = []
    for model, results in measured:
        for r in results:
            cells = r.shipped.row("")
            rows.append([model, r.name, cells[1], cells[3], cells[5], f"{r.rate:.0f}"])
    return table(["model", "set", "MRR@10", "hit@3", "search_code p50 / p95 ms", "encode chunks/s"], rows)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--libs",
        default=",".join(DOCSTRING_LIBS),
        help="installed packages the docstring corpus is drawn from",
    )
    ap.add_argument(
        "--limit",
        type=int,
        default=None,
        help="at most this many functions in the docstring corpus (default: all)",
    )
    ap.add_argument(
        "--queries",
        type=int,
        default=600,
        help="docstring queries asked, evenly spread over the corpus (default 600; "
        "every function stays in the corpus as a distractor)",
    )
    ap.add_argument("--quick", action="store_true", help="--limit 600 --queries 300")
    ap.add_argument(
        "--sets",
        default=",".join(SETS),
        help=f"the query sets to run, comma-separated (default: {','.join(SETS)})",
    )
    ap.add_argument(
        "--fusions", action="store_true", help="also print the fusion rules considered, on the same lists"
    )
    ap.add_argument(
        "--headers",
        action="store_true",
        help="also index both corpora with a path/symbol/signature header "
        "before each chunk's text, and measure them the same way",
    )
    ap.add_argument(
        "--runtime",
        choices=["auto", "onnx", "torch"],
        default="auto",
        help="the embedded encoder's runtime (FATHOM_LOCAL_RUNTIME; default: auto)",
    )
    ap.add_argument(
        "--store", default=None, help="postgresql://… to run on PostgreSQL + pgvector (default: LanceDB)"
    )
    ap.add_argument(
        "--models",
        default="default",
        help="embedding models to measure one after the other, comma-separated: "
        "catalogue names (`fathom models`), model folders, or `default`",
    )
    args = ap.parse_args()
    limit = 600 if args.quick and args.limit is None else args.limit
    asked = 300 if args.quick else args.queries
    started = time.perf_counter()
    print(machine())
    work = Path(tempfile.mkdtemp(prefix="fathom-quality-"))
    try:
        wanted = [s.strip() for s in args.sets.split(",") if s.strip()]
        if unknown := sorted(set(wanted) - set(SETS)):
            ap.error(f"unknown sets {unknown}: choose from {', '.join(SETS)}")
        sets: list[tuple[str, str, list[Query]]] = []
        missing: list[str] = []
        if {"docstring", "natural"} & set(wanted):
            libs = [lib for lib in args.libs.split(",") if importlib.util.find_spec(lib)]
            if missing_libs := sorted(set(args.libs.split(",")) - set(libs)):
                print(f"not installed, left out of the docstring corpus: {missing_libs}")
            docs, natural, missing_nat = docstring_corpus(libs, work / "docstring", limit)
            missing += missing_nat
            print(f"docstring corpus: {len(docs)} functions from {len(libs)} libraries")
            step = max(1, len(docs) // asked) if asked else 1
            sets += [("docstring", "docstring", docs[::step][:asked])] if "docstring" in wanted else []
            sets += [("natural", "docstring", natural)] if "natural" in wanted else []
        if "identifier" in wanted:
            idents, missing_ids = identifier_corpus(work / "identifier")
            missing += missing_ids
            sets.append(("identifier", "identifier", idents))
        if "rich" in wanted:
            rich_qs, missing_rich = rich_corpus(work / "rich")
            missing += missing_rich
            sets.append(("rich", "rich", rich_qs))
        if missing:
            print(f"targets not found in the installed versions (skipped): {missing}")
        names = [m.strip() for m in args.models.split(",") if m.strip()]
        base = Settings(data_dir=work / "data", store_url=args.store, local_runtime=args.runtime)
        try:  # every name is checked before anything is indexed
            chosen = [(name, model_settings(base, name)) for name in names]
        except FathomError as exc:
            ap.error(str(exc))
        measured: list[tuple[str, list[SetResult]]] = []
        for i, (_, model) in enumerate(chosen):
            settings = model.model_copy(update={"data_dir": work / f"data-{i}"})
            encoder = local_encoder(settings)
            print(f"\n# encoder: {encoder.id} on {type(encoder).__name__}")
            fathom = Fathom(settings, encoder=encoder)
            code_only(fathom)
            projects = list(dict.fromkeys(p for _, p, _ in sets))
            projects += [p + "-header" for p in projects] if args.headers else []
            for project in projects:
                if fathom.store.has_project(project):
                    fathom.store.drop_project(project)
            results = await run_sets(fathom, encoder, work, sets, fusions=args.fusions)
            if args.headers:
                for project in projects[: len(projects) // 2]:
                    _collect_signatures(work / project)
                saved, indexer_mod.embedding_text = indexer_mod.embedding_text, with_header
                try:
                    results += await run_sets(fathom, encoder, work, sets, fusions=False, suffix="-header")
                finally:
                    indexer_mod.embedding_text = saved
            measured.append((encoder.id.removeprefix("local:"), results))
            if args.store:
                for project in projects:
                    fathom.store.drop_project(project)
            fathom.store.close()
        if len(measured) > 1:
            print("\n## every model on every set (search_code as shipped)")
            print(models_table(measured))
        print(f"\nwall time {time.perf_counter() - started:.0f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
