"""The search pipeline: a request in, ranked `SearchHit`s out.

What it owns: the whole path of a search, each stage named once:

    pipeline(service, request, reranker=, depth=) -> Ranking
      (the request was checked when made: `fathom.index.request.SearchRequest`)
      -> retrieve: the projects the caller may search (`Searchable.searchable`), each one's
         space read once from its pointer and the query encoded in it (`encode_query`, by
         `Searchable.encoder_in`); one project through `_hybrid`, every project of one space
         through `_hybrid_many` (the store's `search_many`: the projects' halves pooled,
         fused once, one comparable score); the space read again after: a project another
         model re-indexed meanwhile is searched once more (`_in_their_spaces`)
         -> the store's two rankings (cosine vector top-`STORE_DEPTH`, full-text BM25
            top-`STORE_DEPTH`) fused by the query's shape (`fathom.index.fusion.fuse`)
      -> the pool: the best `POOL` fused hits, reordered by the code-aware stage
         (`fathom.index.ranking.rank`), each mapped to the pipeline's one hit type,
         `SearchHit` (`SearchHit.of`, the only change of shape); never cut by `k`
      -> the reranker stage (`fathom.index.rerank.RerankStage`) on the pool's head, with
         full chunk texts: rescored, or flagged not reranked with the reason
      -> the cut: the first `k` files (each file's best chunk, its other ranges on it,
         `ranking.by_file`) or the first `k` chunks, with their full texts
    -> `Ranking` (hits, reranked, reason, reranker, notes); the server maps it to its wire
       model (`fathom.server.search_answer`) in one function.

Also `find_similar`: the neighbours of the chunk at a file and line, or of a snippet, by
vector alone. Fusion is backend-neutral and works on any `Store` (LanceDB, PostgreSQL).

Each public function is an entry: a search's arguments come checked in its `SearchRequest`
(the other entries check theirs once) and the stages below trust them. The entries a front end uses are `pipeline` (MCP tools, dashboard, agents),
`retrieve` (the service's plain search, the CLI's) and `check_similar` + `nearest` (the
service's `find_similar`); `hybrid_search`, `hybrid_search_many`, `search` and `find_similar`
are the store-level entries tests and benchmarks drive.

Concurrency: `hybrid_search` is synchronous (the store is blocking) and runs its keyword
half on a small module thread pool beside the vector half; the async entries run the store
calls in a worker thread (`asyncio.to_thread`), so the event loop never blocks on LanceDB.

What it refuses to do: rank by raw score across the two searches (cosine and BM25 live on
different scales; fusion normalises each list first), search a shadow slot, score a query
against rows another model wrote than the one that encoded it (even of the same width), or
check an argument twice on one path.

API:
    await pipeline(service: Searchable, request: SearchRequest, *, reranker=None,
                   depth=None) -> Ranking
    await candidates(service, query, project=None, table="code", depth=40, *,
                     where=None) -> Noted[SearchHit]   (with full texts, before the reranker)
    await retrieve(service, request: SearchRequest) -> Noted
    hybrid_search(store, project, table, vector, query, k=10, *, depth=None,
                  where=None) -> list[Hit]
    hybrid_search_many(store, projects, table, vector, query, k=10, *, depth=None,
                       where=None) -> (list[Hit], {project: DamagedProject})
    async search(store, encoder: Provider, project, query, *, table="code", k=10,
                 where=None) -> list[Hit]
    (`where`: a `fathom.index.filters.SearchFilter`, passed to both halves: the store applies
    it before cutting each top k)
    async find_similar(store, project, *, table="code", path=None, line=None, snippet=None,
                       encoder=None, k=10) -> list[Hit]
    check_similar(table, k, path=, line=, snippet=); await nearest(...) -> list[Hit]
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from fathom.errors import ConfigError, StoreError, WidthMismatch, whole_number
from fathom.index.filters import SearchFilter
from fathom.index.fusion import QueryShape, fuse, query_shape
from fathom.index.interim import InterimIndex
from fathom.index.ranking import by_file, rank
from fathom.index.request import MAX_K, SearchRequest, check_k, check_query
from fathom.index.rerank import NO_CANDIDATES, NOT_CONFIGURED, RerankStage
from fathom.index.results import (
    Noted,
    Ranking,
    SearchHit,
    skipped_note,
)
from fathom.index.store import DamagedProject, Hit, Store, check_table_kind
from fathom.inference.provider import Provider
from fathom.inference.router import Router
from fathom.space import Space

# A project whose first index runs: its walked chunks, and the note its answers carry.
Early = tuple[InterimIndex, str]

_KEYWORD_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="fathom-keyword")

# The ranked pool: the fused candidates every answer is cut from, whatever its `k` (so the
# order never depends on k), from each half's best `STORE_DEPTH`.
POOL = MAX_K
STORE_DEPTH = 150
# How many of the pool's head the reranker stage reads: by default, and at most (each is a
# whole chunk sent to it).
RERANK_DEPTH = 30
MAX_DEPTH = 100
MAX_LINE = 2**31 - 1  # the stores keep line numbers as 32-bit integers


class Searchable(Protocol):
    """What the pipeline needs of the service (`fathom.service.Fathom`): the store as the
    caller sees it, the projects a search reads, and each table's query encoder. Named here so
    that retrieval does not import the service above it."""

    @property
    def store(self) -> Store: ...

    def searchable(self, project: str | None, table: str) -> tuple[list[str], list[str]]: ...

    def encoder_in(self, space: Space, project: str) -> Provider: ...


# --------------------------------------------------------------------------- the pipeline


async def pipeline(
    service: Searchable,
    request: SearchRequest,
    *,
    reranker: Router | Provider | None = None,
    depth: int | None = None,
    early: Sequence[Early] = (),
) -> Ranking:
    """The ranked pool (hybrid search, code-aware ranking), its head rescored by the reranker
    stage, then one result per file (`group="file"`) or per chunk (`"chunk"`): the best `k`.
    The request was checked when made; it is trusted here.

    Nothing before the cut depends on `k`: the first k results of any answer are the first k
    of a longer one. `depth` is how many of the pool's head the reranker reads; `early`: the
    first indexes that answer keyword-only meanwhile (`_retrieve`)."""
    depth = min(MAX_DEPTH, max(depth or RERANK_DEPTH, 1))
    pool = await _retrieve(service, request, early)
    head: list[SearchHit] = []
    if not pool:
        found = Ranking([], reranked=False, reason=NO_CANDIDATES)
    elif reranker is None:
        found = Ranking([], reranked=False, reason=NOT_CONFIGURED, candidates=len(pool))
    else:
        head = await _with_texts(service, request.table, pool[:depth])
        found = await RerankStage(reranker).apply(request.query, head, len(head), project=request.project)
    tail = pool[len(head) :]
    # The tail keeps retrieval order, each hit flagged as such once it is among those cut.
    place = {(h.project, h.chunk_id): len(head) + i for i, h in enumerate(tail, start=1)}
    cut = [
        replace(h, reranked=False, retrieval_score=h.score, retrieval_rank=placed)
        if (placed := place.get((h.project, h.chunk_id))) is not None
        else h
        for h in _cut([*found.hits, *tail], request.k, request.group)
    ]
    hits = await _with_texts(service, request.table, cut)
    return Ranking(
        hits,
        reranked=found.reranked,
        reason=found.reason,
        reranker=found.reranker,
        candidates=found.candidates,
        notes=tuple(pool.notes),
    )


async def candidates(
    service: Searchable,
    query: str,
    project: str | None = None,
    table: str = "code",
    depth: int = 40,
    *,
    where: SearchFilter | None = None,
) -> Noted:
    """The ranked pool's best `depth` chunks over one project (or all), with full texts;
    `where` filters inside the store, before each half of the pool is cut."""
    request = SearchRequest(query, project, table, depth, where, "chunk")
    pool = await _retrieve(service, request)
    return Noted(await _with_texts(service, table, pool[:depth]), pool.notes)


async def retrieve(service: Searchable, request: SearchRequest, early: Sequence[Early] = ()) -> Noted:
    """The best `k` of the ranked pool over one project (or every searchable one), one per
    file or per chunk, without the reranker stage and without their full texts."""
    pool = await _retrieve(service, request, early)
    return Noted(_cut(pool, request.k, request.group), pool.notes)


def _cut(ranked: Sequence[SearchHit], k: int, group: str) -> list[SearchHit]:
    """The first `k` results: chunks, or files (each file's best chunk, carrying the file's
    other ranges of the ranking)."""
    if group == "chunk":
        return list(ranked[:k])
    return [
        replace(f.best, others=tuple((o.start_line, o.end_line, o.symbol, o.chunk_id) for o in f.others))
        for f in by_file(ranked)[:k]
    ]


async def _with_texts(service: Searchable, table: str, hits: Sequence[SearchHit]) -> list[SearchHit]:
    """`hits` with their full chunk texts (the snippet where the store keeps none), fetched
    once per project for the hits that lack one."""
    missing: dict[str, list[str]] = {}
    for h in hits:
        if not h.text:
            missing.setdefault(h.project, []).append(h.chunk_id)

    async def texts_of(name: str) -> dict[tuple[str, str], str]:
        try:
            got = await asyncio.to_thread(service.store.chunk_texts, name, table, missing[name])
        except StoreError:
            got = {}  # a backend without stored texts: the snippet is the best we have
        return {(name, cid): t for cid, t in got.items()}

    texts: dict[tuple[str, str], str] = {}
    for got in await asyncio.gather(*(texts_of(n) for n in sorted(missing))):
        texts.update(got)
    return [h if h.text else replace(h, text=texts.get((h.project, h.chunk_id), h.snippet)) for h in hits]


async def _retrieve(service: Searchable, request: SearchRequest, early: Sequence[Early] = ()) -> Noted:
    """The ranked pool: the best `POOL` fused `Hit`s over one project (or every searchable
    one), each project's query encoded by its table's own reference encoder, reordered by
    the code-aware stage (`fathom.index.ranking.rank`), as `SearchHit`s; a damaged project a
    search over all of them meets is skipped, and noted. Never cut by the caller's `k`.

    `early`: the projects whose first index is running, each with its walked chunks
    (`fathom.index.interim`) and the note its answers carry. Their keyword half alone joins
    the pool (fused with no vector list, like a project of another space); the project asked
    for, when it is one of them, is answered from it alone, with its note."""
    query, project, table, where = request.query, request.project, request.table, request.where
    shape = query_shape(query)
    if project is not None and early:
        found, notes = await asyncio.to_thread(_keyword_only, early, table, query, where), [early[0][1]]
        return _pooled(found, shape, project, table, early, notes)
    names, notes = await asyncio.to_thread(service.searchable, project, table)
    found = await _in_their_spaces(service, names, table, query, where, notes, one=project is not None)
    if project is None and early:
        found += await asyncio.to_thread(_keyword_only, early, table, query, where)
    return _pooled(found, shape, project, table, early, notes)


def _keyword_only(early: Sequence[Early], table: str, query: str, where: SearchFilter | None) -> list[Hit]:
    """The first indexes' keyword lists, pooled by BM25 and fused with no vector list: each
    hit's score is its keyword score normalised, on the same [0, 1] scale as a fused hit."""
    pooled = [h for index, _ in early for h in index.search(table, query, STORE_DEPTH, where)]
    pooled.sort(key=lambda h: -h.score)
    return fuse([], pooled[:STORE_DEPTH], query, limit=POOL)


def _pooled(
    found: list[Hit],
    shape: QueryShape,
    project: str | None,
    table: str,
    early: Sequence[Early],
    notes: list[str],
) -> Noted:
    """The pool: `found` reordered by the code-aware stage, as `SearchHit`s (a first index's
    with its full text, which no store holds yet)."""
    ranked = rank(found, shape, project=project)[:POOL]
    held = {index.project: index for index, _ in early}
    return Noted(
        [
            SearchHit.of(
                h.project or "",
                h,
                text=held[h.project].text(table, h.chunk_id) if h.project in held else "",
            )
            for h in ranked
        ],
        notes,
    )


def spaces_of(store: Store, names: Sequence[str], table: str, notes: list[str]) -> list[tuple[str, Space]]:
    """Each project's space in `table`, from its pointer (no table opened; blocking, so a
    caller on the event loop runs it in one thread hop): a damaged one is left out with a note,
    one with no such table (or dropped since the search named it) is left out."""
    spaces = []
    for name in names:
        try:
            space = store.space_of(name, table)
        except DamagedProject as exc:
            notes.append(skipped_note(name, exc.detail))
            continue
        if space is not None:
            spaces.append((name, space))
    return spaces


def _space_of_one(
    store: Store, names: Sequence[str], table: str, notes: list[str]
) -> list[tuple[str, Space]]:
    """The one project a search names, with its space (none: no such table); damage is raised."""
    return [(name, space) for name in names if (space := store.space_of(name, table)) is not None]


# A search whose projects are re-indexed by another model while it runs is run again once;
# a project moved again by then is left out of the answer, and noted.
SPACE_TRIES = 2


async def _in_their_spaces(
    service: Searchable,
    names: list[str],
    table: str,
    query: str,
    where: SearchFilter | None,
    notes: list[str],
    *,
    one: bool,
) -> list[Hit]:
    """The fused hits of `names` (one project, or every one), the query encoded in each
    project's space as its pointer was read once, and kept only if that space is still the
    table's once the store has answered: so a query is never scored against rows another
    model wrote (a model change promoted mid-search), whatever the two models' widths.

    Projects of one space share one query vector and one fusion (`_hybrid_many`: the
    projects' halves fan out in parallel, and one fusion over the pooled lists puts every hit
    on one scale). Projects of different spaces (another encoder) are fused apart and merged
    by fused score, each group normalised to [0, 1] with the same boosts. A damaged project
    is left out with a note, unless it is the one project asked for: that is raised."""
    store, read = service.store, _space_of_one if one else spaces_of
    for _ in range(SPACE_TRIES):
        tried: list[str] = []
        spaces = await asyncio.to_thread(read, store, names, table, tried)
        groups: dict[tuple[Space, str], tuple[Provider, list[str]]] = {}
        for name, space in spaces:
            encoder = service.encoder_in(space, name)
            groups.setdefault((space, encoder.id), (encoder, []))[1].append(name)
        found: list[Hit] = []
        failed: list[tuple[list[str], WidthMismatch]] = []
        for encoder, members in groups.values():
            vector = await encode_query(encoder, query)
            try:
                found += await asyncio.to_thread(
                    _search_group, store, members, table, vector, query, where, tried, one
                )
            except WidthMismatch as exc:  # a model of another width, promoted since the read?
                failed.append((members, exc))
        now = dict(await asyncio.to_thread(spaces_of, store, [n for n, _ in spaces], table, []))
        moved = {name for name, space in spaces if now.get(name) != space}
        for members, mismatch in failed:
            if not moved & set(members):
                raise mismatch  # no model change explains it: the encoder's width is wrong
            moved.update(members)  # searched again, all of the group
        if not moved:
            break
    notes.extend(tried)
    notes.extend(
        f"left out project {n!r}: its {table} table switched to another embedding model while "
        f"it was being searched; search again"
        for n in sorted(moved)
    )
    return ([] if moved else found) if one else [h for h in found if h.project not in moved]


def _search_group(
    store: Store,
    members: list[str],
    table: str,
    vector: np.ndarray,
    query: str,
    where: SearchFilter | None,
    notes: list[str],
    one: bool,
) -> list[Hit]:
    """The fused hits of projects of one space, for one query vector (blocking); a damaged
    project among several is left out and noted."""
    if one:  # `rank` sets the one project on each hit
        return _hybrid(store, members[0], table, vector, query, POOL, STORE_DEPTH, where)
    hits, damaged = _hybrid_many(store, members, table, vector, query, POOL, STORE_DEPTH, where)
    notes.extend(skipped_note(n, exc.detail) for n, exc in damaged.items())
    return [h if h.project is not None else replace(h, project="") for h in hits]


# --------------------------------------------------------------------------- the store's halves


def hybrid_search(
    store: Store,
    project: str,
    table: str,
    vector: Any,
    query: str,
    k: int = 10,
    *,
    depth: int | None = None,
    where: SearchFilter | None = None,
) -> list[Hit]:
    """Vector top-`depth` and full-text top-`depth`, fused (`fusion.fuse`), best `k` returned."""
    check_table_kind(table)
    check_k(k)
    return _hybrid(store, project, table, vector, query, k, depth, where)


def _hybrid(
    store: Store,
    project: str,
    table: str,
    vector: Any,
    query: str,
    k: int,
    depth: int | None,
    where: SearchFilter | None,
) -> list[Hit]:
    depth = depth or max(4 * k, 40)
    text = None
    if query and query.strip():
        # The keyword half runs beside the vector half: both release the GIL (LanceDB's Rust
        # engine, numpy's BLAS), so on two cores a hybrid query costs about the slower half.
        text = _KEYWORD_POOL.submit(store.text_search, project, table, query, depth, where=where)
    # If the vector half raises, the keyword half finishes on its own and is dropped.
    vector_hits = (
        store.vector_search(project, table, vector, depth, where=where) if vector is not None else []
    )
    text_hits = text.result() if text is not None else []
    return fuse(vector_hits, text_hits, query, limit=k)


def hybrid_search_many(
    store: Store,
    projects: Sequence[str],
    table: str,
    vector: Any,
    query: str,
    k: int = 10,
    *,
    depth: int | None = None,
    where: SearchFilter | None = None,
) -> tuple[list[Hit], dict[str, DamagedProject]]:
    """One hybrid search over several projects of ONE space: the store pools every project's
    vector list by cosine and keyword list by BM25, each cut to `depth`
    (`Store.search_many`: in parallel, or from memory for the tables LanceStore's cache
    holds), and they are fused once, so every hit's score is on one scale (as if the
    projects were one index). Hits carry their `project`. A damaged project is left out and
    returned beside the hits; any other error is raised."""
    check_table_kind(table)
    check_k(k)
    return _hybrid_many(store, projects, table, vector, query, k, depth, where)


def _hybrid_many(
    store: Store,
    projects: Sequence[str],
    table: str,
    vector: Any,
    query: str,
    k: int,
    depth: int | None,
    where: SearchFilter | None,
) -> tuple[list[Hit], dict[str, DamagedProject]]:
    depth = depth or max(4 * k, 40)
    pooled = store.search_many(projects, table, vector, query, depth, where=where)
    return fuse(pooled.vector, pooled.text, query, limit=k), pooled.damaged


async def encode_query(encoder: Provider, text: str) -> np.ndarray:
    # Encoders with a query form (E5's "query: " prefix) expose embed_query; others embed
    # the query like any passage.
    embed_query = getattr(encoder, "embed_query", None)
    if embed_query is not None:
        return np.asarray(await embed_query(text), dtype=np.float32).reshape(-1)
    vectors = await encoder.embed([text])
    row: np.ndarray = np.asarray(vectors, dtype=np.float32)[0]  # the one text's vector
    return row


async def search(
    store: Store,
    encoder: Provider,
    project: str,
    query: str,
    *,
    table: str = "code",
    k: int = 10,
    where: SearchFilter | None = None,
) -> list[Hit]:
    """Encode `query` with the table's encoder and run the hybrid search off the event loop."""
    check_table_kind(table)
    check_query(query)
    check_k(k)
    vector = await encode_query(encoder, query)
    return await asyncio.to_thread(_hybrid, store, project, table, vector, query, k, None, where)


# --------------------------------------------------------------------------- find_similar


def check_similar(table: str, k: Any, *, path: str | None, line: int | None, snippet: str | None) -> None:
    """The one check of find_similar's arguments: the table, `k`, and a file line or a
    snippet (not both). A path without its line is refused by `nearest`, after the caller
    has checked the project (the order a caller has always met the refusals in)."""
    check_table_kind(table)
    check_k(k)
    if path is None and not (snippet and snippet.strip()):
        raise ConfigError("find_similar needs either path and line, or a snippet")
    if path is not None and snippet:
        raise ConfigError("find_similar takes path and line, or a snippet, not both")
    if line is not None:
        whole_number("line", line, 1, MAX_LINE)


async def find_similar(
    store: Store,
    project: str,
    *,
    table: str = "code",
    path: str | None = None,
    line: int | None = None,
    snippet: str | None = None,
    encoder: Provider | None = None,
    k: int = 10,
) -> list[Hit]:
    """Chunks whose vectors lie nearest to the chunk at `path`:`line` (itself excluded), or
    to `snippet` encoded by `encoder`: the caller's choice, used whatever the table's space
    (the service's `find_similar` chooses the encoder of the space it reads instead)."""
    check_similar(table, k, path=path, line=line, snippet=snippet)
    encoder_in = None if encoder is None else lambda space: encoder
    return await nearest(
        store, project, table=table, path=path, line=line, snippet=snippet, encoder_in=encoder_in, k=k
    )


async def nearest(
    store: Store,
    project: str,
    *,
    table: str,
    path: str | None,
    line: int | None,
    snippet: str | None,
    encoder_in: Callable[[Space], Provider] | None,
    k: int,
) -> list[Hit]:
    """`find_similar` on arguments `check_similar` passed. The origin (the chunk's stored
    vector, or the snippet encoded by `encoder_in` in the table's space) is of the space read
    before the search; the hits are kept only if that space is still the table's after it,
    else it runs once more (a model change promoted meanwhile)."""

    async def once(space: Space | None) -> list[Hit]:
        if path is not None:
            if line is None:
                raise ConfigError("find_similar from a file needs a line number too")
            found = await asyncio.to_thread(store.chunk_at, project, table, path, int(line))
            if found is None:
                raise ConfigError(
                    f"no indexed {table} chunk covers {path}:{line} in project {project!r}; check "
                    f"the path (relative to the project root) and that the project is indexed"
                )
            origin, vector = found
            hits = await asyncio.to_thread(store.vector_search, project, table, vector, k + 1)
            return [h for h in hits if h.chunk_id != origin.chunk_id][:k]
        if encoder_in is None:
            raise ConfigError("find_similar from a snippet needs the table's encoder")
        if space is None:
            return []  # no such table: nothing is similar
        vector = await encode_query(encoder_in(space), snippet or "")
        return await asyncio.to_thread(store.vector_search, project, table, vector, k)

    for _ in range(SPACE_TRIES):
        space = await asyncio.to_thread(store.space_of, project, table)
        try:
            hits = await once(space)
        except WidthMismatch:  # a model of another width, promoted since the read?
            if await asyncio.to_thread(store.space_of, project, table) == space:
                raise  # no model change explains it
            continue
        if await asyncio.to_thread(store.space_of, project, table) == space:
            return hits
    raise StoreError(
        f"the {table} table of {project!r} switched to another embedding model while it was "
        f"being searched; search again"
    )
