"""Index jobs: walk a project, chunk it, embed the chunks, write them with provenance.

What this module owns: the order of an indexing run and its crash behaviour.

* A full run (or the first run of a table) builds a shadow slot and promotes it atomically:
  searches see the previous active table, whole, until the switch. Each finished batch is
  written to the shadow as it completes, so a killed run keeps its work; the next full run
  resumes the same-space shadow and skips the chunk ids already there.
* An incremental run compares the project's chunks with the active table's manifest: only
  chunks whose id changed (ids hash the path, line range and content) are written; rows of
  removed or changed chunks are deleted after their replacements are written, so a crash
  between the two leaves stale extra rows for the next run to delete, never a missing one.
* Vectors are keyed by content. A chunk whose text already has a vector in the active table
  (its lines shifted, its file was renamed, or a full rebuild in the same space) is written
  with that vector and the provenance it was written under (`Store.carry_vectors`), not
  embedded again: an edit costs the chunks whose text changed.
* Promotion: every table rebuilt through a shadow is promoted in ONE step
  (`Store.promote_together`), after every table is embedded: a kill at any moment leaves the
  previous active tables, all of them, or the new ones, all of them.
* The walk runs on its own small thread pool (`MAX_WALKS` at once), so a flood of index calls
  queues there instead of exhausting the executor that serves searches; a cancelled job (or
  a cancelled caller) stops its walk between two entries. System folders are refused as a
  root (`walker.check_root`).
* Progress (files, chunks done/total, chunks/s, ETA, skipped files by reason) and a `Job`
  with pause / resume / cancel, which the admin API exposes.

What it refuses to do: choose who may write into a table (the store's `Clearance` does, on
every write), decide routing (it embeds through one `Provider`, or through a `Pool` when one
is given), or read the filesystem itself beyond what the walker returns.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import threading
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from fathom.errors import ConfigError, FathomError, failure_of
from fathom.index.chunk import Chunk
from fathom.index.chunking import EstimatedTokens, TokenCounter, chunk_file, fit_tokens
from fathom.index.store import TABLE_KINDS, Slot, Store
from fathom.inference.provider import Provider
from fathom.space import Provenance, Space

Sink = Callable[[list[int], np.ndarray, Provider], Awaitable[None]]

# Walks (with chunking) at once in this process. Each holds a thread for as long as its
# project's disk takes; more would only fight for the same disk, and they must never take
# the default executor's threads, which serve searches.
MAX_WALKS = 2
_WALK_POOL = ThreadPoolExecutor(max_workers=MAX_WALKS, thread_name_prefix="fathom-walk")


class EmbedRunner(Protocol):
    """What `fathom.inference.pool.Pool` offers: embed `texts`, calling `sink` per batch."""

    async def run(self, texts: Sequence[str], sink: Sink) -> Any: ...


class JobState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    CANCELLED = "cancelled"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # the server stopped while it ran; resumable (`server.job_records`)


class JobCancelled(FathomError):
    def __init__(self, job_id: str, project: str):
        self.job_id, self.project = job_id, project
        super().__init__(
            f"index job {job_id} for project {project!r} was cancelled; the active table is "
            f"unchanged and a later full run resumes from the rows already embedded"
        )


class ProjectPathError(ConfigError):
    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"cannot index {path}: {reason}. Give the path of a project folder.")


@dataclass(frozen=True)
class IndexProgress:
    """One progress event. `chunks_total` counts the chunks this run must embed (resumed or
    unchanged chunks are `chunks_reused`, not part of the total)."""

    project: str
    phase: str  # "starting", "loading model", "checking encoders", "walking", "chunking",
    #             "reusing vectors", "embedding", "promoting", "done"
    files: int = 0
    chunks_total: int = 0
    chunks_done: int = 0
    chunks_reused: int = 0
    chunks_deleted: int = 0
    chunks_carried: int = 0  # written with a vector reused by content (moved, renamed)
    elapsed_s: float = 0.0
    rate: float = 0.0  # chunks per second over the embedding phase
    eta_s: float | None = None
    skipped: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class IndexReport:
    project: str
    root: str
    full: bool
    resumed: bool
    files: int
    chunks: int  # chunks in the project now (both tables)
    embedded: int  # chunks embedded by this run: only those whose text is new to the table
    reused: int  # chunks already in place (unchanged, or resumed from an earlier run)
    deleted: int  # rows removed whose text is gone (changed or vanished chunks)
    skipped: dict[str, int]
    elapsed_s: float
    embed_s: float
    rate: float  # chunks embedded per second of the embedding phase
    tables: dict[str, int]  # active rows per table after the run
    providers: dict[str, int] = field(default_factory=dict)  # chunks embedded per provider id
    notes: dict[str, int] = field(default_factory=dict)  # files kept but worth saying, by kind
    carried: int = 0  # chunks written with a stored vector of the same text (lines moved,
    #                   file renamed, full rebuild in the same space): not embedded
    skipped_dirs: dict[str, list[str]] = field(default_factory=dict)  # folders left out, by reason
    split: int = 0  # chunks cut further to fit the encoder's token limit
    max_tokens: int | None = None  # that limit; None: sized in characters only


class Job:
    """One indexing run's state, and the operator's handle on it.

    `pause()` takes effect between batches (a batch in flight finishes and is written);
    `cancel()` likewise, and the run ends with `JobCancelled`, leaving the shadow slot to be
    resumed by the next full run.
    """

    def __init__(self, project: str, root: Path | str, *, full: bool = False,
                 clock: Callable[[], float] = time.monotonic, reason: str | None = None):
        self.id = uuid.uuid4().hex[:12]
        self.project = project
        self.root = Path(root)
        self.full = full
        self.clock = clock
        self.reason = reason  # why it runs: None when asked for, "sync" when the watcher started it
        self.state = JobState.PENDING
        self.progress = IndexProgress(project, "pending")
        self.report: IndexReport | None = None
        self.error: str | None = None
        self.created_at = clock()
        self.finished_at: float | None = None
        self._running = asyncio.Event()
        self._running.set()
        self._cancelled = False
        # Seen by the worker thread walking the project, which cannot await anything.
        self.stop = threading.Event()

    def pause(self) -> None:
        if self.state in (JobState.PENDING, JobState.RUNNING):
            self._running.clear()
            self.state = JobState.PAUSED

    def resume(self) -> None:
        if self.state is JobState.PAUSED:
            self.state = JobState.RUNNING
            self._running.set()

    def cancel(self) -> None:
        if not self.finished:
            self._cancelled = True
            self.stop.set()
            self._running.set()  # a paused job must wake up to notice

    @property
    def finished(self) -> bool:
        return self.state in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)

    async def checkpoint(self) -> None:
        """Called between batches: waits while paused, raises JobCancelled if cancelled."""
        if not self._running.is_set():
            await self._running.wait()
        if self._cancelled:
            raise JobCancelled(self.id, self.project)

    def as_dict(self) -> dict[str, Any]:
        p = self.progress
        return {
            "id": self.id, "project": self.project, "root": str(self.root), "full": self.full,
            "reason": self.reason, "state": self.state.value, "error": self.error,
            "phase": p.phase, "files": p.files, "chunks_total": p.chunks_total,
            "chunks_done": p.chunks_done, "chunks_reused": p.chunks_reused,
            "chunks_carried": p.chunks_carried,
            "rate": round(p.rate, 2), "eta_s": None if p.eta_s is None else round(p.eta_s, 1),
            "skipped": dict(p.skipped),
        }


@dataclass(frozen=True)
class Discovered:
    files: int
    chunks: list[Chunk]
    skipped: dict[str, int]
    skipped_dirs: dict[str, list[str]] = field(default_factory=dict)
    notes: dict[str, int] = field(default_factory=dict)  # kept, but worth saying (walker.notes)
    split: int = 0  # chunks cut further to fit the encoder's token limit (`chunking.fit_tokens`)


class ChunkCache:
    """The chunks of files already chunked, by (path, text): a sync after an edit re-parses
    the edited files only. Bounded by the text it holds; least recently used goes first."""

    def __init__(self, max_chars: int = 64 << 20):
        self.max_chars = max_chars
        self._items: OrderedDict[tuple[str, str, str], tuple[int, list[Chunk], int]] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def chunks(self, path: str, text: str, tokens: TokenCounter | None = None) -> tuple[list[Chunk], int]:
        """The file's chunks and how many were cut to fit `tokens` (cached per tokenizer)."""
        key = (path, hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
               tokens.key if tokens is not None else "")
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit[1], hit[2]
        chunks, split = chunk_and_fit(path, text, tokens)
        with self._lock:
            if key not in self._items:
                self._items[key] = (len(text), chunks, split)
                self._chars += len(text)
            while self._chars > self.max_chars and len(self._items) > 1:
                _, (n, _, _) = self._items.popitem(last=False)
                self._chars -= n
        return chunks, split


def chunk_and_fit(path: str, text: str, tokens: TokenCounter | None) -> tuple[list[Chunk], int]:
    chunks = chunk_file(path, text)
    return fit_tokens(chunks, tokens) if tokens is not None and chunks else (chunks, 0)


_CHUNKS = ChunkCache()


def discover(root: Path, *, include: Sequence[str] = (), extra_ignores: Sequence[str] = (),
             cache: ChunkCache | None = _CHUNKS,
             cancel: threading.Event | None = None, tokens: TokenCounter | None = None) -> Discovered:
    """Walk and chunk a project (blocking: run it in a thread). `include` globs take back
    what the built-in skips and .gitignore leave out; `extra_ignores` leave more out. With
    `tokens` (the encoder's tokenizer) no chunk exceeds its token limit. Stops with
    `WalkCancelled` between two entries once `cancel` is set."""
    from fathom.index.walker import WalkCancelled, walk

    walked = walk(root, include=include, extra_ignores=extra_ignores, cancel=cancel)
    chunks: list[Chunk] = []
    files = split = 0
    for item in walked.files:
        if cancel is not None and cancel.is_set():
            raise WalkCancelled(root)
        files += 1
        got, cut = (cache.chunks(item.path, item.text, tokens) if cache is not None
                    else chunk_and_fit(item.path, item.text, tokens))
        chunks.extend(got)
        split += cut
    # One row per chunk id in each table: identical (path, lines, text) twice would be the same
    # row anyway. The table is part of the key: a docstring's lines can be a code chunk too.
    unique = list({(c.table, c.chunk_id): c for c in chunks}.values())
    return Discovered(files, unique, dict(walked.skipped),
                      {k: list(v) for k, v in walked.skipped_dirs.items()}, dict(walked.notes), split)


def embedding_text(chunk: Chunk) -> str:
    """What is embedded for a chunk: its raw text, nothing prepended.

    A header naming the chunk's path and symbol (and, for a later window of a long
    definition, its signature) was measured with `bench/search_quality.py --headers`: it
    helped identifier queries on the vector half alone but cost natural-language questions
    more than it gave (docs/benchmarks.md), so it is not added. This is the one definition of
    the embedded text: a row's vector means this text, so changing it changes what every
    existing index means, and would need every table re-embedded (a full re-index)."""
    return chunk.text


def space_for(encoder: Provider, table: str) -> Space:
    """A table's vector space as defined by its reference encoder."""
    info = encoder.info
    if info.width is None:
        raise ConfigError(f"encoder {info.id} does not declare its width; it cannot define a table")
    return Space(table=table, model=info.model, width=int(info.width), reference=info.id)


def _default_provenance(provider: Provider, space: Space) -> Provenance:
    # An indexer without a gate (tests, tools) writes with its reference encoder only, which
    # needs no verdict; the service passes `Fathom.provenance`, which records the gate's.
    return Provenance(provider.id, None)


class Indexer:
    """Runs index jobs into one store, with one reference encoder per table.

    `runner` is an optional `Pool` (anything with `run(texts, sink)`), or a function of the
    table kind returning one (each table has its own role's pool); without one the reference
    encoder embeds directly, `batch_size` texts per call. `provenance` maps the provider that
    embedded a batch to the provenance written with it (the gate supplies verdict ids there).
    `space_of(table)` is the space a new build of a table gets (default: the encoder's).
    """

    def __init__(self, store: Store, encoder: Provider, *, batch_size: int = 64,
                 runner: EmbedRunner | Callable[[str], EmbedRunner] | None = None,
                 provenance: Callable[[Provider, Space], Provenance] = _default_provenance,
                 space_of: Callable[[str], Space] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 discover_fn: Callable[..., Discovered] = discover,
                 refused_roots: Iterable[str] | None = None):
        self.store = store
        self.encoder = encoder
        self.batch_size = max(1, int(batch_size))
        self.runner = runner
        self.provenance = provenance
        self.space_of = space_of or (lambda table: space_for(self.encoder, table))
        self.clock = clock
        self.discover = discover_fn
        self.refused_roots = tuple(refused_roots) if refused_roots is not None else None

    async def _token_counter(self) -> TokenCounter | None:
        """What chunks are sized by: the encoder's own tokenizer when it has one (an in-process
        model: loaded here unless the service's start-up loaded it; wrappers pass it through),
        else, for a sidecar's or a cloud model, an estimate against the limit its provider info
        declares; None otherwise (sized in characters only)."""
        counter = getattr(self.encoder, "token_counter", None)
        if callable(counter):
            return await asyncio.to_thread(counter)
        info = self.encoder.info
        remote = info.host is not None or info.is_cloud
        return EstimatedTokens(info.max_tokens, key=info.id) if remote and info.max_tokens else None

    def job(self, project: str, root: Path | str, *, full: bool = False) -> Job:
        return Job(project, root, full=full, clock=self.clock)

    async def run(self, job: Job,
                  progress: Callable[[IndexProgress], None] | None = None) -> IndexReport:
        """Run `job` to completion; the job's state says how it ended."""
        job.state = JobState.RUNNING if job.state is not JobState.PAUSED else job.state
        try:
            report = await self._run(job, progress)
        except (JobCancelled, asyncio.CancelledError):
            job.stop.set()  # a walk still running in its thread stops at its next entry
            job.state = JobState.CANCELLED
            job.finished_at = self.clock()
            raise
        except BaseException as exc:
            failure = failure_of(exc) if isinstance(exc, Exception) else None
            job.state = JobState.FAILED
            job.error = str(failure or exc) or type(exc).__name__
            job.finished_at = self.clock()
            if failure is not None and failure is not exc:
                raise failure from exc
            raise
        job.report = report
        job.state = JobState.DONE
        job.finished_at = self.clock()
        return report

    async def _run(self, job: Job, progress: Callable[[IndexProgress], None] | None) -> IndexReport:
        # Elapsed time counts from the job's creation: start-up (opening the store, loading
        # the model, the gate's checks) is part of what the operator waited for.
        started = job.created_at if job.clock is self.clock else self.clock()
        root = job.root.expanduser()
        if not root.exists():
            raise ProjectPathError(str(root), "no such folder")
        if not root.is_dir():
            raise ProjectPathError(str(root), "it is a file, not a folder")
        from fathom.index.walker import REFUSED_ROOTS, WalkCancelled, check_root

        root = check_root(root, REFUSED_ROOTS if self.refused_roots is None else self.refused_roots)

        state = {"p": IndexProgress(job.project, "walking")}

        def emit(**changes: Any) -> None:
            p = replace(state["p"], elapsed_s=self.clock() - started, **changes)
            state["p"] = p
            job.progress = p
            if progress is not None:
                progress(p)

        emit()
        await job.checkpoint()
        tokens = await self._token_counter()
        walk = functools.partial(self.discover, root, cancel=job.stop)
        if tokens is not None:
            walk = functools.partial(walk, tokens=tokens)
        try:
            found = await asyncio.get_running_loop().run_in_executor(_WALK_POOL, walk)
        except WalkCancelled:
            raise JobCancelled(job.id, job.project) from None
        emit(phase="chunking", files=found.files, skipped=found.skipped)
        by_table: dict[str, list[Chunk]] = {t: [] for t in TABLE_KINDS}
        for chunk in found.chunks:
            by_table[chunk.table].append(chunk)

        # Plan every table before embedding anything, so the total (and the ETA) is known.
        plans = [await asyncio.to_thread(self._plan, job, t, by_table[t]) for t in TABLE_KINDS]
        reused = sum(p.reused for p in plans)
        if any(p.reusable for p in plans):
            emit(phase="reusing vectors", chunks_reused=reused)
            for plan in plans:
                await job.checkpoint()
                await asyncio.to_thread(self._carry, job, plan)
        carried = sum(p.carried for p in plans)
        total = sum(len(p.todo) for p in plans)
        if total:
            # Load the model before the clock starts: a rate that includes a one-off load
            # would mislead the ETA. Only in-process encoders have a `load`.
            load = getattr(self.encoder, "load", None)
            if callable(load):
                emit(phase="loading model", chunks_total=total, chunks_reused=reused,
                     chunks_carried=carried)
                await asyncio.to_thread(load)
        emit(phase="embedding", chunks_total=total, chunks_reused=reused, chunks_carried=carried)

        embed_started = self.clock()
        counts = {"done": 0}
        providers: Counter[str] = Counter()

        def on_batch(n: int, provider_id: str) -> None:
            counts["done"] += n
            providers[provider_id] += n
            spent = max(self.clock() - embed_started, 1e-9)
            rate = counts["done"] / spent
            left = total - counts["done"]
            emit(chunks_done=counts["done"], rate=rate, eta_s=left / rate if rate > 0 else None)

        for plan in plans:
            await self._embed(job, plan, on_batch)
        # Promotion comes after every table is embedded, and is one step for all of them, so
        # a killed run changes no table or every table.
        deleted = await asyncio.to_thread(self._finish, job, plans)
        embed_s = self.clock() - embed_started
        emit(phase="promoting" if any(p.shadow for p in plans) else "done", chunks_deleted=deleted)

        tables = {}
        for t in TABLE_KINDS:
            info = await asyncio.to_thread(self.store.table_info, job.project, t) \
                if hasattr(self.store, "table_info") else None
            tables[t] = info.rows if info is not None else 0
        elapsed = self.clock() - started
        emit(phase="done")
        return IndexReport(
            project=job.project, root=str(root), full=job.full,
            resumed=any(p.resumed for p in plans), files=found.files,
            chunks=len(found.chunks), embedded=counts["done"], reused=reused, deleted=deleted,
            skipped=dict(found.skipped), elapsed_s=elapsed, embed_s=embed_s,
            rate=counts["done"] / embed_s if embed_s > 0 and counts["done"] else 0.0,
            tables=tables, providers=dict(providers), carried=carried,
            skipped_dirs=found.skipped_dirs, notes=dict(found.notes),
            split=found.split, max_tokens=tokens.limit if tokens is not None else None,
        )

    # ---- planning: what to embed, into which slot

    def _plan(self, job: Job, table: str, chunks: list[Chunk]) -> _Plan:
        space = self.space_of(table)
        project = job.project
        active = self.store.space_of(project, table, Slot.ACTIVE)
        if not chunks and active is None:
            return _Plan(table, space, Slot.ACTIVE, [], 0, set(), shadow=False, resumed=False,
                         skip=True)
        wanted = {c.chunk_id for c in chunks}
        texts = {c.content_hash for c in chunks}
        if job.full or active is None:
            # A full build goes through a shadow, even the very first one: a killed first run
            # leaves no half-built table visible, and the next run resumes it.
            shadow = self.store.begin_shadow(project, table, space)
            have = self.store.chunk_ids(project, table, Slot.SHADOW) if shadow.resumed else set()
            # Rows of chunks that changed since the interrupted run must not be promoted.
            stale = have - wanted
            todo = [c for c in chunks if c.chunk_id not in have]
            # Vectors of unchanged text come over from the active table of the same space.
            stored = ({e.content_hash for e in self.store.manifest(project, table, Slot.ACTIVE)}
                      if active == space else set())
            return _Plan(table, space, Slot.SHADOW, todo, len(chunks) - len(todo), stale,
                         shadow=True, resumed=shadow.resumed, stored=stored)
        # Incremental: the active table's own space must be ours (SpaceMismatch otherwise).
        self.store.open_table(project, table, space)
        entries = self.store.manifest(project, table, Slot.ACTIVE)
        have = {e.chunk_id for e in entries}
        todo = [c for c in chunks if c.chunk_id not in have]
        stale = have - wanted
        # A stale row whose text lives on elsewhere (moved lines, a renamed file) is not a
        # deletion of content: its vector is carried to the new location first.
        moved = {e.chunk_id for e in entries if e.chunk_id in stale and e.content_hash in texts}
        return _Plan(table, space, Slot.ACTIVE, todo, len(chunks) - len(todo), stale,
                     shadow=False, resumed=False, stored={e.content_hash for e in entries},
                     relocated=moved)

    def _carry(self, job: Job, plan: _Plan) -> None:
        """Write the planned chunks whose text already has a vector, with that vector."""
        candidates = [c for c in plan.todo if c.content_hash in plan.stored]
        if not candidates:
            return
        carried = self.store.carry_vectors(job.project, plan.table, candidates, slot=plan.slot,
                                           source=Slot.ACTIVE)
        plan.todo = [c for c in plan.todo if c.chunk_id not in carried]
        plan.carried = len(carried)

    # ---- embedding: batches written as they finish

    async def _embed(self, job: Job, plan: _Plan, on_batch: Callable[[int, str], None]) -> None:
        if not plan.todo:
            return
        # Similar lengths in one batch waste less padding (what SentenceTransformer.encode
        # does internally within one call, done here across the whole run).
        todo = sorted(plan.todo, key=lambda c: len(c.text))
        texts = [embedding_text(c) for c in todo]
        pending: asyncio.Task[None] | None = None

        async def sink(indices: list[int], vectors: np.ndarray, provider: Provider) -> None:
            nonlocal pending
            rows = [todo[i] for i in indices]
            provenance = self.provenance(provider, plan.space)
            # The write of one batch overlaps the encoding of the next (LanceDB and torch both
            # release the GIL); at most one write is in flight, so order and memory stay bounded.
            if pending is not None:
                await pending
            pending = asyncio.create_task(asyncio.to_thread(
                self.store.write, job.project, plan.table, rows, vectors, provenance,
                slot=plan.slot))
            pending.add_done_callback(lambda t, n=len(rows), pid=provider.id:
                                      None if t.cancelled() or t.exception() else on_batch(n, pid))
            await job.checkpoint()

        try:
            runner = self.runner
            if runner is not None and not hasattr(runner, "run"):
                runner = runner(plan.table)
            if runner is not None:
                await runner.run(texts, sink)
            else:
                for start in range(0, len(texts), self.batch_size):
                    await job.checkpoint()
                    idx = list(range(start, min(start + self.batch_size, len(texts))))
                    vectors = await self.encoder.embed([texts[i] for i in idx])
                    await sink(idx, vectors, self.encoder)
        finally:
            if pending is not None:
                # A batch already encoded is still written: a killed run keeps it.
                await asyncio.shield(pending)

    def _finish(self, job: Job, plans: list[_Plan]) -> int:
        deleted = 0
        for plan in plans:
            if plan.skip:
                continue
            removed = 0
            if plan.stale:
                removed = self.store.delete(job.project, plan.table,
                                            chunk_ids=sorted(plan.stale), slot=plan.slot)
            if not plan.shadow and (plan.todo or plan.carried or removed):
                self.store.refresh(job.project, plan.table)
            # Rows whose text moved elsewhere were replaced, not lost: only gone text counts.
            deleted += max(0, removed - len(plan.relocated))
        shadows = [p.table for p in plans if p.shadow and not p.skip]
        if shadows:
            self.store.promote_together(job.project, shadows)
        return deleted


@dataclass
class _Plan:
    table: str
    space: Space
    slot: Slot
    todo: list[Chunk]
    reused: int
    stale: set[str]
    shadow: bool
    resumed: bool
    skip: bool = False
    stored: set[str] = field(default_factory=set)  # content hashes with a vector in the active slot
    relocated: set[str] = field(default_factory=set)  # stale ids whose text lives on elsewhere
    carried: int = 0

    @property
    def reusable(self) -> bool:
        return any(c.content_hash in self.stored for c in self.todo)
