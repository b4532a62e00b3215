"""Search quality on real code and real queries: vector-only, keyword-only and Fathom's search
as shipped, side by side in one run.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/search_quality.py            # ~5-8 min on 2 cores
    .venv/bin/python bench/search_quality.py --quick                      # 600 functions, ~2 min
    .venv/bin/python bench/search_quality.py --fusions                    # + fusion alternatives
    .venv/bin/python bench/search_quality.py --headers                    # + chunks embedded with/without a header

Two query sets, each over its own indexed project:

* **docstring** (CodeSearchNet's method): every function or method with a docstring in a few
  installed libraries (no tests, no dunder methods, at least 3 lines of code, a first sentence
  of at least 3 words, no duplicate query or body). The query is the docstring's first
  sentence; the target is the function with its docstring removed, written into a corpus of
  files that mirrors the library's modules (one file per module, functions one after another,
  methods dedented to the top level as CodeSearchNet stores them). Every other function of the
  corpus is a distractor.
* **identifier**: hand-written identifier-style queries (`bench/identifier_queries.py`) over
  the real sources of httpx and click as installed, each aimed at one definition.

A query is answered by `Fathom.index`-built projects (MiniLM, the LanceDB store by default) in
three ways: the store's vector top-10 (the query encoded by the same MiniLM), the store's
keyword top-10 (full-text BM25), and `search_code` over an in-process MCP session (what an
agent gets: hybrid retrieval, fusion, then the reranker stage, which finds no reranker here
and keeps retrieval order). A hit is the target when it is in the target's file and its line
range holds the target's `def`/`class` line. Printed per set and ranking: MRR@10, hit@1,
hit@5, and per-query latency (p50/p95; the vector column's latency includes query encoding).

`--fusions` also prints the fusion rules considered, computed from the same depth-40 vector and
keyword lists the shipped search fuses (so the comparison is exact, not re-run).
`--headers` indexes the docstring corpus a second time with the other choice of what is
embedded (a short path/symbol/signature header before each chunk, or the raw chunk) and
prints both.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import importlib
import os
import re
import shutil
import statistics
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

import numpy as np  # noqa: E402

from bench._common import machine, percentile, table  # noqa: E402
from bench.quality_queries import IDENTIFIER, NATURAL  # noqa: E402
from fathom.config import Settings  # noqa: E402
from fathom.index import search as search_mod  # noqa: E402
from fathom.index.store import Hit  # noqa: E402
from fathom.inference.local import LocalEncoder  # noqa: E402
from fathom.service import Fathom  # noqa: E402

DOCSTRING_LIBS = ("rich", "werkzeug", "jinja2", "requests", "websockets", "packaging",
                  "psycopg", "urllib3", "anyio", "attr", "markdown_it", "pygments")
IDENTIFIER_LIBS = ("httpx", "click")
K = 10
DEPTH = 40  # what the hybrid search asks of each half (search_mod.hybrid_search's default)


# --------------------------------------------------------------------------- the query sets


@dataclass(frozen=True)
class Target:
    path: str  # relative to the project root
    line: int  # the def/class line (1-based)


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


def docstring_corpus(libs: Sequence[str], root: Path,
                     limit: int | None) -> tuple[list[Query], list[Query], list[str]]:
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
                head = lines[node.lineno - 1: doc_node.lineno - 1]
                body = lines[doc_node.end_lineno: node.end_lineno]  # type: ignore[misc]
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
    """1-based rank of the first hit holding the target's definition line, within the top K."""
    for i, h in enumerate(hits[:K], start=1):
        if h.path == target.path and h.start_line <= target.line <= h.end_line:
            return i
    return None


@dataclass
class Tally:
    ranks: list[int | None]
    ms: list[float]

    def row(self, name: str) -> list[str]:
        n = len(self.ranks)
        mrr = sum(1.0 / r for r in self.ranks if r) / n
        hit1 = sum(1 for r in self.ranks if r == 1) / n
        hit5 = sum(1 for r in self.ranks if r and r <= 5) / n
        lat = (f"{percentile(self.ms, 50):.1f} / {percentile(self.ms, 95):.1f}"
               if self.ms else "-")
        return [name, f"{mrr:.3f}", f"{hit1:.3f}", f"{hit5:.3f}", lat]

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


async def evaluate(fathom: Fathom, encoder: LocalEncoder, project: str, queries: list[Query],
                   *, keep_lists: bool) -> tuple[dict[str, Tally], list[Lists]]:
    from mcp import Client

    from fathom.server.mcp_tools import build_mcp_server

    store = fathom.store
    tallies = {name: Tally([], []) for name in ("vector", "keyword", "shipped")}
    lists: list[Lists] = []
    encoder.encode_sync(["warm up"])
    store.vector_search(project, "code", encoder.encode_sync(["warm up"])[0], K)  # load the matrix
    async with Client(build_mcp_server(fathom)) as client:
        await client.call_tool("search_code", {"query": "warm up", "project": project, "k": K})
        for q in queries:
            def vector_only() -> list[Hit]:
                vec = encoder.encode_sync([q.text])[0]
                return store.vector_search(project, "code", vec, DEPTH if keep_lists else K)

            vhits, vms = timed(vector_only)
            thits, tms = timed(lambda: store.text_search(project, "code", q.text,
                                                         DEPTH if keep_lists else K))
            t0 = time.perf_counter()
            res = await client.call_tool("search_code", {"query": q.text, "project": project,
                                                         "k": K})
            sms = (time.perf_counter() - t0) * 1000
            if res.is_error:
                raise RuntimeError(f"search_code failed for {q.text!r}: {res.content}")
            shits = [_Shown(**r) for r in res.structured_content["results"]]
            for name, hits, ms in (("vector", vhits, vms), ("keyword", thits, tms),
                                   ("shipped", shits, sms)):
                tallies[name].ranks.append(rank_of(hits, q.target))
                tallies[name].ms.append(ms)
            if keep_lists:
                lists.append(Lists(vhits, thits))
    return tallies, lists


@dataclass
class _Shown:
    """A result as `search_code` returns it (only what scoring reads)."""

    path: str
    start_line: int
    end_line: int

    def __init__(self, path: str, start_line: int, end_line: int, **_: Any):
        self.path, self.start_line, self.end_line = path, start_line, end_line


def fusion_rows(queries: list[Query], lists: list[Lists]) -> list[list[str]]:
    rows = []
    for name, fuse in search_mod.FUSION_CANDIDATES.items():
        ranks = [rank_of(fuse(l.vector, l.text, q.text), q.target) for q, l in zip(queries, lists)]
        rows.append(Tally(ranks, []).row(name)[:4])
    return rows


async def index(fathom: Fathom, root: Path, project: str) -> tuple[int, float]:
    t0 = time.perf_counter()
    report = await fathom.index(root, project, full=True)
    return report.chunks, time.perf_counter() - t0


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--libs", default=",".join(DOCSTRING_LIBS),
                    help="installed packages the docstring corpus is drawn from")
    ap.add_argument("--limit", type=int, default=None,
                    help="at most this many functions in the docstring corpus (default: all)")
    ap.add_argument("--quick", action="store_true", help="--limit 600")
    ap.add_argument("--fusions", action="store_true",
                    help="also print the fusion rules considered, on the same lists")
    ap.add_argument("--headers", action="store_true",
                    help="also index the docstring corpus with the other embedding text")
    ap.add_argument("--store", default=None,
                    help="postgresql://… to run on PostgreSQL + pgvector (default: LanceDB)")
    args = ap.parse_args()
    limit = 600 if args.quick and args.limit is None else args.limit
    started = time.perf_counter()
    print(machine())
    work = Path(tempfile.mkdtemp(prefix="fathom-quality-"))
    try:
        docs = docstring_corpus(args.libs.split(","), work / "docstring", limit)
        idents, missing = identifier_corpus(work / "identifier")
        if missing:
            print(f"identifier targets not found in the installed versions (skipped): {missing}")
        settings = Settings(data_dir=work / "data", store_url=args.store)
        encoder = LocalEncoder.from_settings(settings)
        fathom = Fathom(settings, encoder=encoder)
        for name in ("docstring", "identifier"):
            if fathom.store.has_project(name):
                fathom.store.drop_project(name)
        sets = [("docstring", work / "docstring", docs), ("identifier", work / "identifier", idents)]
        for name, root, queries in sets:
            chunks, secs = await index(fathom, root, name)
            libs = sorted({q.library for q in queries})
            print(f"\n## {name}: {len(queries)} queries over {chunks} chunks "
                  f"({', '.join(libs)}); indexed in {secs:.0f} s")
            tallies, lists = await evaluate(fathom, encoder, name, queries,
                                            keep_lists=args.fusions)
            print(table(["ranking", "MRR@10", "hit@1", "hit@5", "latency p50 / p95 ms"],
                        [tallies[n].row(label) for n, label in (
                            ("vector", "vector only (MiniLM cosine)"),
                            ("keyword", "keyword only (full-text)"),
                            ("shipped", "Fathom search_code (as shipped)"))]))
            best = max(tallies["vector"].mrr, tallies["keyword"].mrr)
            print(f"shipped - best half: {tallies['shipped'].mrr - best:+.3f} MRR@10")
            if args.fusions:
                print(table(["fusion rule (same lists)", "MRR@10", "hit@1", "hit@5"],
                            fusion_rows(queries, lists)))
        print(f"\nwall time {time.perf_counter() - started:.0f} s")
        if args.store:
            for name in ("docstring", "identifier"):
                fathom.store.drop_project(name)
        fathom.store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
