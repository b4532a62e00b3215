"""The vector store: one vector space per (project, table kind), blue/green slots, provenance.

API summary (what the indexer, search and MCP tools code against)
-----------------------------------------------------------------
Everything below is a *blocking* call (LanceDB is synchronous); async callers wrap it in
`asyncio.to_thread(...)`. `fathom.index.search.search(...)` already does that for queries.
`table` is always a table kind, "code" or "docs"; `slot` is `Slot.ACTIVE` (what searches
read) or `Slot.SHADOW` (a full re-index being built).

    store = LanceStore(root: Path, clearance: Clearance | None = None, *, clock=time.time,
                       matrix_cache_bytes=MATRIX_CACHE_BYTES, exact_max_rows=EXACT_MAX_ROWS,
                       ann_min_rows=20_000, ann_nprobes=None, ann_candidates=None,
                       ann_background=True, cache_idle_s=60.0)
    store.cache_stats -> CacheStats(hits, loads, bypassed)     # the matrix cache, LanceDB only
    store.ann_pending(project, table) -> bool; store.wait_for_ann(timeout) -> bool
    # LanceDB only, to look at (a benchmark, a test): its parts and the tables behind the slots
    store.matrix_cache (MatrixCache) · store.ann (AnnBuilder) · store.project_dir(project) -> Path
    store.slot_table(project, table, slot=Slot.ACTIVE) -> Lance table | None
    store.generation(project, table) -> int; store.collect_garbage(project)
    store = open_store(settings)   # fathom.index.backend: PostgreSQL if settings.store_url is postgresql://…, else LanceDB

    # spaces and slots
    store.open_table(project, table, space) -> TableInfo        # creates; SpaceMismatch if other space
    store.space_of(project, table, slot=Slot.ACTIVE) -> Space | None
    store.begin_shadow(project, table, space) -> ShadowInfo     # resumes a same-space shadow
    store.chunk_ids(project, table, slot=Slot.ACTIVE) -> set[str]   # resume: what is already there
    store.promote(project, table) -> TableInfo                  # atomic switch, old version dropped
    store.promote_together(project, tables) -> list[TableInfo]  # several tables in ONE switch
    with store.project_lock(project, holder=None) as LockHolder: ...  # one writer per project
    store.abandon_shadow(project, table) -> None

    # writes: validated, then cleared, BEFORE anything is written (WidthMismatch / StoreError /
    # NotCleared); a refused batch changes nothing. Upserts by chunk_id (idempotent).
    store.write(project, table, rows: Sequence[Chunk], vectors: np.ndarray, provenance,
                *, slot=Slot.ACTIVE) -> int
    store.replace_vectors(project, table, chunk_ids, vectors, provenance, *, slot=Slot.ACTIVE) -> int
    store.carry_vectors(project, table, rows, *, slot=Slot.ACTIVE, source=Slot.ACTIVE) -> set[str]
        # content-keyed reuse: rows whose text already has a vector in `source` (same space)
        # are written with that vector and its own provenance; returns their chunk ids
    store.delete(project, table, *, chunk_ids=(), paths=(), slot=Slot.ACTIVE) -> int
    store.manifest(project, table, slot=Slot.ACTIVE) -> list[ManifestEntry]  # chunk_id, content_hash, path
    store.refresh(project, table) -> None       # rebuild keyword/ANN indexes after incremental writes

    # search primitives (fusion lives in fathom.index.search)
    store.vector_search(project, table, vector, k, *, where=None) -> list[Hit]   # cosine, best first
    store.text_search(project, table, query, k, *, where=None) -> list[Hit]      # BM25, best first
    store.search_many(projects, table, vector, query, k, *, where=None) -> Pooled
        # both, over several projects of one space: Pooled(vector, text, damaged), each list
        # the pooled best k (cosine / BM25; ties keep the projects' order), hits carry `project`
        # `where`: a fathom.index.filters.SearchFilter, applied before the top k is cut
    store.chunk_at(project, table, path, line) -> tuple[Hit, np.ndarray] | None   # find_similar

    # projects and provenance audit
    store.table_info(project, table) -> TableInfo   # rows, space, last_indexed, shadow_rows
    store.list_projects() -> list[ProjectInfo]      # ProjectInfo(name, tables: {kind: TableInfo})
    store.has_project(project) -> bool
    store.drop_project(project) -> None
    store.provenance_counts(project, table, slot=Slot.ACTIVE) -> dict[(provider_id, verdict_id), int]
    store.written_since(project, table, since: datetime, provider_id=None) -> list[ManifestEntry]
    store.chunk_texts(project, table, chunk_ids, slot=Slot.ACTIVE) -> dict[chunk_id, text]

Errors: `WidthMismatch`, `NotCleared`, `DiskFull` (fathom.errors), `SpaceMismatch`,
`UnknownProject`, `NoShadow`, `DamagedProject`, `DuplicateChunks`, `ProjectLocked` (here; all
`StoreError`). LanceStore reports what LanceDB or the filesystem says about a project's files
(a table folder gone, a truncated or corrupt file, a garbled state.json) as `DamagedProject`,
never as an empty project; `list_projects` lists a damaged project with its `damage`.


The package, part by part
-------------------------
* `contract`: the `Store` ABC and the backend-neutral rules every backend inherits and cannot
  bypass: batch validation and the clearance check run in `Store.write` /
  `Store.replace_vectors` before the backend's `_upsert` is reached. `rules` holds those
  checks (table kind, project name, vectors, rows) and the text a chunk is searched by;
  `values` the dataclasses; `errors` the typed errors.
* `lance`: `LanceStore`, the embedded default, with its parts: `matrix_cache` (the tables
  answered from memory), `ann` (IVF-PQ indexes built in the background and the exact copy
  that serves meanwhile), `lance_tables` (schema, SQL pieces, hits from rows), `project_files`
  (the per-project index lock).
* `postgres`: `PostgresStore`, the same contract on PostgreSQL + pgvector, with
  `pg_database` (connections, schema, URL redaction) and `pg_state` (the gate's verdicts and
  golden vectors and the routing state it keeps for every server).

What it refuses to do: embed anything (vectors come from the caller), decide who is cleared
(the injected `Clearance` decides; the default clears only the space's reference encoder),
mix two spaces in one table, or let a search see a shadow slot.
"""

from fathom.index.store.ann import ann_params
from fathom.index.store.contract import FANOUT_POOL, Store
from fathom.index.store.errors import (
    DamagedProject,
    DuplicateChunks,
    LockHolder,
    NoShadow,
    ProjectLocked,
    SpaceMismatch,
    UnknownProject,
)
from fathom.index.store.lance import LanceStore
from fathom.index.store.lance_tables import HIT_COLUMNS, fts_config, in_list
from fathom.index.store.matrix_cache import (
    CACHE_IDLE_S,
    EXACT_MAX_ROWS,
    MATRIX_CACHE_BYTES,
    CacheStats,
    single_threaded_blas,
)
from fathom.index.store.rules import (
    CAMEL_PARTS,
    SNIPPET_CHARS,
    SNIPPET_LINES,
    TABLE_KINDS,
    check_project_name,
    check_space_kind,
    check_table_kind,
    keywords_of,
    snippet_of,
    space_from_json,
    space_to_json,
    validate_rows,
    validate_vectors,
)
from fathom.index.store.values import (
    Hit,
    ManifestEntry,
    Pooled,
    ProjectInfo,
    ShadowInfo,
    Slot,
    StoredVector,
    TableInfo,
)

__all__ = [
    "CACHE_IDLE_S",
    "CAMEL_PARTS",
    "EXACT_MAX_ROWS",
    "FANOUT_POOL",
    "HIT_COLUMNS",
    "MATRIX_CACHE_BYTES",
    "SNIPPET_CHARS",
    "SNIPPET_LINES",
    "TABLE_KINDS",
    "CacheStats",
    "DamagedProject",
    "DuplicateChunks",
    "Hit",
    "LanceStore",
    "LockHolder",
    "ManifestEntry",
    "NoShadow",
    "Pooled",
    "ProjectInfo",
    "ProjectLocked",
    "ShadowInfo",
    "Slot",
    "SpaceMismatch",
    "Store",
    "StoredVector",
    "TableInfo",
    "UnknownProject",
    "ann_params",
    "check_project_name",
    "check_space_kind",
    "check_table_kind",
    "fts_config",
    "in_list",
    "keywords_of",
    "single_threaded_blas",
    "snippet_of",
    "space_from_json",
    "space_to_json",
    "validate_rows",
    "validate_vectors",
]
