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
* A run streams: the walk lists the project's files, then reads and chunks them a window of
  chunks at a time (`WINDOW`), each window planned (ids and content hashes against the
  slot's), carried or embedded and written before the next, which the walk reads meanwhile.
  Only ids and hashes are kept for the whole run (duplicates, rows to delete at the end);
  texts and vectors are held a window at a time, so memory does not grow with the project.
  Rows to delete (chunks gone since the last run) are known once the walk ends, and are
  deleted then, after every replacement is written.
* Vectors are keyed by content. A chunk whose text already has a vector in the active table
  (its lines shifted, its file was renamed, or a full rebuild in the same space) is written
  with that vector and the provenance it was written under (`Store.carry_vectors`), not
  embedded again: an edit costs the chunks whose text changed; within a run, once (`embed_once`).
* Promotion: every table rebuilt through a shadow is promoted in ONE step
  (`Store.promote_together`), after every table is embedded: a kill at any moment leaves the
  previous active tables, all of them, or the new ones, all of them; a cancel promotes none.
* The walk runs on its own small thread pool (`MAX_WALKS` at once), so a flood of index calls
  queues there instead of exhausting the executor that serves searches; a cancelled job (or
  a cancelled caller) stops its walk between two entries. System folders are refused as a
  root (`walker.check_root`).
* Progress (files, chunks done/total, chunks/s, ETA, skipped files by reason) and a `Job`
  with pause / resume / cancel, which the admin API exposes. While the walk is still going,
  the total is extrapolated from the share of the project's bytes walked; it is exact once
  the walk ends.

What it refuses to do: choose who may write into a table (the store's `Clearance` does, on
every write), decide routing (it embeds through one `Provider`, or through a `Pool` when one
is given), or read the filesystem itself beyond what the walker returns.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from fathom.errors import ConfigError, failure_of
from fathom.index.chunk import Chunk
from fathom.index.chunk_cache import SHARED as _CHUNKS
from fathom.index.chunk_cache import ChunkCache, chunk_and_fit
from fathom.index.chunking import EstimatedTokens, TokenCounter
from fathom.index.embed_once import Folded, recent_for
from fathom.index.interim import InterimIndex
from fathom.index.job import IndexProgress, IndexReport, Job, JobCancelled, JobState
from fathom.index.store import TABLE_KINDS, Slot, Store, UnknownProject
from fathom.inference.provider import Provider
from fathom.space import Provenance, Space

Sink = Callable[[list[int], np.ndarray, Provider], Awaitable[None]]

# Walks (with chunking) at once in this process. Each holds a thread for as long as its
# project's disk takes; more would only fight for the same disk, and they must never take
# the default executor's threads, which serve searches.
MAX_WALKS = 2
_WALK_POOL = ThreadPoolExecutor(max_workers=MAX_WALKS, thread_name_prefix="fathom-walk")
# Chunks planned and embedded at a time: the walk reads the next window while this one is
# embedded, so a run holds at most two windows of text (a few tens of MiB), whatever the
# project's size. Within a window, chunks are embedded in order of length (less padding); a
# pool runs one job per window, so a window large enough keeps its end game (straggler copies
# while the last batches finish) rare.
WINDOW = 8192


class EmbedRunner(Protocol):
    """What `fathom.inference.pool.Pool` offers: embed `texts`, calling `sink` per batch."""

    async def run(self, texts: Sequence[str], sink: Sink) -> Any: ...


class ProjectPathError(ConfigError):
    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"cannot index {path}: {reason}. Give the path of a project folder.")


def check_project_root(root: Path | str, refused: Iterable[str] | None = None) -> Path:
    """The one check of a folder to index: it exists, is a folder, and is no system folder
    (`walker.check_root` against `refused`, default `REFUSED_ROOTS`). Returns its real path
    (links followed); raises `ProjectPathError` or `RefusedRoot`. Every run is checked once, by
    whoever starts it (`Fathom.index`, or `Indexer.run` when handed an unchecked root)."""
    from fathom.index.walker import REFUSED_ROOTS, check_root

    given = Path(root).expanduser()
    real = check_root(given, REFUSED_ROOTS if refused is None else refused)
    if not given.exists():
        raise ProjectPathError(str(root), "no such folder on this machine")
    if not given.is_dir():
        raise ProjectPathError(str(root), "it is a file, not a folder")
    return real


@dataclass(frozen=True)
class Discovered:
    files: int
    chunks: list[Chunk]
    skipped: dict[str, int]
    skipped_dirs: dict[str, list[str]] = field(default_factory=dict)
    notes: dict[str, int] = field(default_factory=dict)  # kept, but worth saying (walker.notes)
    split: int = 0  # chunks cut further to fit the encoder's token limit (`chunking.fit_tokens`)
    secrets: list[str] = field(default_factory=list)  # files left out as `secret`, by path


class Discovery:
    """A project's chunks, file by file, as the walk reads them: what an index job streams.

    `survey()` lists the files (no file read; blocking: run it in a thread); iterating then
    reads and chunks one file at a time, so at most one file's text and chunks are held here
    whatever the project's size. The tallies (`files`, `skipped`, `notes`, `split`, and
    `bytes_done` against `bytes_total`, which measure how far the walk has gone) grow as it
    goes and are final once the iteration ends. `include` globs take back what the built-in
    skips and .gitignore leave out; `extra_ignores` leave more out. With `tokens` (the
    encoder's tokenizer) no chunk exceeds its token limit. Stops with `WalkCancelled`
    between two files once `cancel` is set."""

    def __init__(
        self,
        root: Path,
        *,
        include: Sequence[str] = (),
        extra_ignores: Sequence[str] = (),
        cache: ChunkCache | None = _CHUNKS,
        cancel: threading.Event | None = None,
        tokens: TokenCounter | None = None,
    ):
        self.root, self.include, self.extra_ignores = Path(root), include, extra_ignores
        self.cache, self.cancel, self.tokens = cache, cancel, tokens
        self.files = self.split = self.bytes_done = self.bytes_total = 0
        self._survey: Any = None

    def survey(self) -> None:
        from fathom.index.walker import survey

        self._survey = survey(
            self.root, include=self.include, extra_ignores=self.extra_ignores, cancel=self.cancel
        )
        self.bytes_total = self._survey.bytes

    @property
    def skipped(self) -> dict[str, int]:
        return dict(self._survey.result.skipped) if self._survey is not None else {}

    @property
    def skipped_dirs(self) -> dict[str, list[str]]:
        s = self._survey
        return {k: list(v) for k, v in s.result.skipped_dirs.items()} if s is not None else {}

    @property
    def notes(self) -> dict[str, int]:
        return dict(self._survey.result.notes) if self._survey is not None else {}

    @property
    def secrets(self) -> list[str]:  # credential files left out whole (by name), by path
        return sorted(self._survey.result.secrets) if self._survey is not None else []

    @property
    def redacted(self) -> list[str]:  # files indexed with their key material redacted, by path
        return sorted(self._survey.result.redacted) if self._survey is not None else []

    def __iter__(self) -> Iterator[Chunk]:
        if self._survey is None:
            self.survey()
        listed = self._survey
        try:
            yield from self._read(listed)
        finally:
            listed.close()  # the folder descriptors the reads held

    def _read(self, listed: Any) -> Iterator[Chunk]:
        from fathom.index.walker import WalkCancelled

        for candidate in listed.candidates:
            if self.cancel is not None and self.cancel.is_set():
                raise WalkCancelled(self.root)
            start, weight = self.bytes_done, listed.weight(candidate)
            item = listed.read(candidate)
            got: list[Chunk] = []
            if item is not None:
                self.files += 1
                got, cut = (
                    self.cache.chunks(item.path, item.text, self.tokens)
                    if self.cache is not None
                    else chunk_and_fit(item.path, item.text, self.tokens)
                )
                self.split += cut
            # A file's bytes are walked chunk by chunk: a window that ends inside a file has
            # walked that share of it (what the progress total is extrapolated from).
            for i, chunk in enumerate(got, 1):
                self.bytes_done = start + weight * i // len(got)
                yield chunk
            self.bytes_done = start + weight


def discover(
    root: Path,
    *,
    include: Sequence[str] = (),
    extra_ignores: Sequence[str] = (),
    cache: ChunkCache | None = _CHUNKS,
    cancel: threading.Event | None = None,
    tokens: TokenCounter | None = None,
) -> Discovered:
    """Every chunk of a project at once (blocking: run it in a thread): `Discovery`, collected,
    one row per chunk id in each table. For tools and tests; index jobs stream instead."""
    found = Discovery(
        root, include=include, extra_ignores=extra_ignores, cache=cache, cancel=cancel, tokens=tokens
    )
    # One row per chunk id in each table: identical (path, lines, text) twice would be the same
    # row anyway. The table is part of the key: a docstring's lines can be a code chunk too.
    unique = list({(c.table, c.chunk_id): c for c in found}.values())
    return Discovered(
        found.files, unique, found.skipped, found.skipped_dirs, found.notes, found.split, found.secrets
    )


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
    `discover_fn(root, cancel=, tokens=)` gives the project's `Discovery`; `window` is how many
    chunks are planned and embedded at a time (`WINDOW`); `lenders` are the projects whose
    stored vectors a run may carry by content (a git project's other branches).
    """

    def __init__(
        self,
        store: Store,
        encoder: Provider,
        *,
        batch_size: int = 64,
        runner: EmbedRunner | Callable[[str], EmbedRunner] | None = None,
        provenance: Callable[[Provider, Space], Provenance] = _default_provenance,
        space_of: Callable[[str], Space] | None = None,
        clock: Callable[[], float] = time.monotonic,
        discover_fn: Callable[..., Discovery] = Discovery,
        refused_roots: Iterable[str] | None = None,
        window: int = WINDOW,
        lenders: Iterable[str] = (),
    ):
        self.store, self.encoder = store, encoder
        self.batch_size = max(1, int(batch_size))
        self.runner = runner
        self.provenance = provenance
        self.space_of = space_of or (lambda table: space_for(self.encoder, table))
        self.clock = clock
        self.discover = discover_fn
        self.window = max(1, int(window))
        self.refused_roots = tuple(refused_roots) if refused_roots is not None else None
        self.lenders = tuple(lenders)  # projects whose vectors it may carry (git branches)

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

    async def run(
        self, job: Job, progress: Callable[[IndexProgress], None] | None = None, *, root: Path | None = None
    ) -> IndexReport:
        """Run `job` to completion; the job's state says how it ended. `root`: the job's folder
        as `check_project_root` returned it, when the caller checked it already."""
        job.state = JobState.RUNNING if job.state is not JobState.PAUSED else job.state
        try:
            if root is None:
                root = check_project_root(job.root, self.refused_roots)
            report = await self._run(job, root, progress)
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
        finally:
            job.interim = None  # promoted, the tables answer; failed or cancelled, nothing does
        job.report = report
        job.state = JobState.DONE
        job.finished_at = self.clock()
        return report

    async def _run(
        self, job: Job, root: Path, progress: Callable[[IndexProgress], None] | None
    ) -> IndexReport:
        # Elapsed time counts from the job's creation: start-up (opening the store, loading
        # the model, the gate's checks) is part of what the operator waited for.
        started = job.created_at if job.clock is self.clock else self.clock()
        from fathom.index.walker import WalkCancelled

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
        found = self.discover(root, cancel=job.stop, **({"tokens": tokens} if tokens is not None else {}))
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(_WALK_POOL, found.survey)
        except WalkCancelled:
            raise JobCancelled(job.id, job.project) from None
        emit(phase="chunking", skipped=found.skipped)
        plans = {t: await asyncio.to_thread(self._plan, job, t) for t in TABLE_KINDS}
        run = _Run(self, job, plans, emit)
        # A first index: nothing of it answers until promotion, so what the walk reads answers
        # keyword questions meanwhile (`fathom.index.interim`), long before it is all embedded.
        interim = job.interim = InterimIndex(job.project) if all(p.first for p in plans.values()) else None

        # Stream: the walk reads and chunks the next window in its thread while this one is
        # planned and embedded, so at most two windows of chunks (and one file's) are held,
        # however large the project. Rows are written as each batch finishes, as before.
        chunks = iter(found)

        def take() -> tuple[list[Chunk], int]:
            window = list(itertools.islice(chunks, self.window))
            if interim is not None:
                interim.add(window)
            return window, found.bytes_done

        def ahead() -> asyncio.Future[tuple[list[Chunk], int]]:
            fut = loop.run_in_executor(_WALK_POOL, take)
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # seen below, or moot
            return fut

        nxt = ahead()
        while True:
            try:
                window, mark = await nxt
            except WalkCancelled:
                raise JobCancelled(job.id, job.project) from None
            if not window:
                break
            nxt = ahead()
            await job.checkpoint()
            await run.window(window, found, mark / found.bytes_total if found.bytes_total else 1.0)
            del window
        run.walked(found, 1.0)
        # Promotion comes after every table is embedded, in one step: a kill changes none or all.
        deleted = await asyncio.to_thread(self._finish, job, list(plans.values()))
        # Nothing embedded took 0 s (two clock readings once made it -0.0s).
        embed_s = max(self.clock() - run.embed_started, 0.0) if run.embed_started is not None else 0.0
        emit(phase="promoting" if any(p.shadow for p in plans.values()) else "done", chunks_deleted=deleted)

        tables = await asyncio.to_thread(self._rows, job.project)
        elapsed = self.clock() - started
        emit(phase="done")
        return IndexReport(
            project=job.project,
            root=str(root),
            full=job.full or all(p.shadow for p in plans.values()),
            first=bool(plans) and all(p.first for p in plans.values()),
            resumed=any(p.resumed for p in plans.values()),
            files=found.files,
            chunks=sum(len(p.seen) for p in plans.values()),
            embedded=run.done,
            reused=run.reused,
            deleted=deleted,
            skipped=found.skipped,
            elapsed_s=elapsed,
            embed_s=embed_s,
            rate=run.done / embed_s if embed_s > 0 and run.done else 0.0,
            tables=tables,
            providers=dict(run.providers),
            carried=run.carried,
            skipped_dirs=found.skipped_dirs,
            notes=found.notes,
            split=found.split,
            max_tokens=tokens.limit if tokens is not None else None,
            secrets=found.secrets,
            redacted=found.redacted,
        )

    def _rows(self, project: str) -> dict[str, int]:
        """Active rows per table after a run (0 for a table the run did not make)."""
        tables = {}
        for t in TABLE_KINDS:
            try:
                info = self.store.table_info(project, t) if hasattr(self.store, "table_info") else None
            except UnknownProject:
                info = None  # a folder with nothing to index: no table was made
            tables[t] = info.rows if info is not None else 0
        return tables

    # ---- planning: what to embed, into which slot

    def _plan(self, job: Job, table: str) -> _Plan:
        """The table's slot and what it already holds (ids and content hashes only: the chunks
        come later, a window at a time, through `admit`)."""
        space = self.space_of(table)
        project = job.project
        active = self.store.space_of(project, table, Slot.ACTIVE)
        if job.full or active is None:
            # A full build goes through a shadow, even the very first one: a killed first run
            # leaves no half-built table visible, and the next run resumes it. A table that
            # has none yet gets its shadow with its first chunk (a project without docs
            # makes no docs table).
            plan = _Plan(table, space, Slot.SHADOW, shadow=True, first=active is None)
            # Vectors of unchanged text come over from the active table of the same space.
            if active == space:
                plan.stored = {e.content_hash for e in self.store.manifest(project, table, Slot.ACTIVE)}
            if active is not None:
                self._open(job, plan)
            return plan
        # Incremental: the active table's own space must be ours (SpaceMismatch otherwise).
        self.store.open_table(project, table, space)
        plan = _Plan(table, space, Slot.ACTIVE, shadow=False, opened=True)
        plan.texts = set()
        entries = self.store.manifest(project, table, Slot.ACTIVE)
        plan.have = {e.chunk_id: e.content_hash for e in entries if job.paths is None or e.path in job.paths}
        plan.stored = {e.content_hash for e in entries}
        return plan

    def _open(self, job: Job, plan: _Plan) -> None:
        shadow = self.store.begin_shadow(job.project, plan.table, plan.space)
        plan.opened, plan.resumed = True, shadow.resumed
        if shadow.resumed:
            ids = self.store.chunk_ids(job.project, plan.table, Slot.SHADOW)
            plan.have = dict.fromkeys(ids, "")

    def admit(self, job: Job, plan: _Plan, chunks: list[Chunk]) -> list[Chunk]:
        """One window's chunks of a table: the new ones (each chunk id once per run) not already
        in place, less those whose text already has a vector, which are written with it."""
        fresh = plan.see(chunks)
        if not fresh:
            return []
        if not plan.opened:
            self._open(job, plan)
        todo = [c for c in fresh if c.chunk_id not in plan.have]
        plan.reused += len(fresh) - len(todo)
        for lender in (job.project, *self.lenders):  # its own table, then its sibling branches'
            ask = todo if lender != job.project else [c for c in todo if c.content_hash in plan.stored]
            carried = (
                self.store.carry_vectors(
                    job.project, plan.table, ask, slot=plan.slot, source=Slot.ACTIVE, lender=lender
                )
                if ask
                else set()
            )
            todo = [c for c in todo if c.chunk_id not in carried]
            plan.carried += len(carried)
        plan.embedded += len(todo)
        return todo

    # ---- embedding: batches written as they finish

    def runner_for(self, table: str) -> EmbedRunner | None:
        runner = self.runner
        if runner is not None and not hasattr(runner, "run"):
            runner = runner(table)
        return runner

    async def embed(
        self,
        job: Job,
        plan: _Plan,
        runner: EmbedRunner | None,
        todo: list[Chunk],
        on_batch: Callable[[int, str], None],
    ) -> None:
        # Similar lengths in one batch waste less padding (what SentenceTransformer.encode
        # does internally within one call, done here across the window).
        todo = sorted(todo, key=lambda c: len(c.text))
        once = Folded(todo, recent_for(job, self.window), plan.space.reference)
        texts = [embedding_text(c) for c in once.heads]
        pending: asyncio.Task[int] | None = None

        async def sink(
            indices: list[int], vectors: np.ndarray, provider: Provider, rows: list[Chunk] | None = None
        ) -> None:
            nonlocal pending
            if rows is None:  # a batch of distinct texts: to every chunk of each
                rows, vectors = once.rows(indices, vectors, provider)
            provenance = self.provenance(provider, plan.space)
            # The write of one batch overlaps the encoding of the next (LanceDB and torch both
            # release the GIL); at most one write is in flight, so order and memory stay bounded.
            if pending is not None:
                await pending
            pending = asyncio.create_task(
                asyncio.to_thread(
                    self.store.write, job.project, plan.table, rows, vectors, provenance, slot=plan.slot
                )
            )
            n, pid = len(rows), provider.id  # a batch counts once it is stored
            pending.add_done_callback(lambda t: None if t.cancelled() or t.exception() else on_batch(n, pid))
            await job.checkpoint()

        try:
            if once.lent is not None:  # texts this run embedded a moment ago: those vectors
                await sink([], *once.lent)
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
            if not plan.opened:
                continue
            # Rows of chunks gone since the table (or the interrupted run's shadow) was written
            # must not stay, nor be promoted.
            stale = [i for i in plan.have if i not in plan.seen]
            removed = 0
            if stale:
                removed = self.store.delete(job.project, plan.table, chunk_ids=sorted(stale), slot=plan.slot)
            if not plan.shadow and (plan.embedded or plan.carried or removed):
                self.store.refresh(job.project, plan.table)
            # Rows whose text moved elsewhere were replaced, not lost: only gone text counts.
            relocated = sum(1 for i in stale if plan.have[i] in plan.texts) if plan.texts else 0
            deleted += max(0, removed - relocated)
        shadows = [p.table for p in plans if p.shadow and p.opened]
        if shadows and job.stop.is_set():  # cancelled while its last batches were written
            raise JobCancelled(job.id, job.project)
        if shadows:
            self.store.promote_together(job.project, shadows)
        return deleted


@dataclass
class _Plan:
    """One table's run: its slot, and the ids and hashes that decide what to embed. Holds no
    chunk text: windows of chunks pass through `Indexer.admit`."""

    table: str
    space: Space
    slot: Slot
    shadow: bool
    opened: bool = False  # the slot exists (a shadow is begun with the table's first chunk)
    resumed: bool = False
    first: bool = False  # the table had no active slot before this run
    have: dict[str, str] = field(default_factory=dict)  # chunk ids in the slot -> content hash
    #                                                    ("" for a resumed shadow's rows)
    stored: set[str] = field(default_factory=set)  # content hashes with a vector in the active slot
    texts: set[str] | None = None  # content hashes seen this run (incremental: moved rows)
    seen: set[str] = field(default_factory=set)  # chunk ids seen this run
    reused: int = 0
    carried: int = 0
    embedded: int = 0

    def see(self, chunks: list[Chunk]) -> list[Chunk]:
        """The chunks not seen before in this run: one row per chunk id, identical (path,
        lines, text) twice would be the same row anyway."""
        fresh = []
        for c in chunks:
            cid = c.chunk_id
            if cid not in self.seen:
                self.seen.add(cid)
                fresh.append(c)
                if self.texts is not None:
                    self.texts.add(c.content_hash)
        return fresh


class _Run:
    """The tallies of one streamed run and its progress: the total to embed is known once the
    walk ends; until then it is extrapolated from the share of the project's bytes walked."""

    def __init__(self, indexer: Indexer, job: Job, plans: dict[str, _Plan], emit: Callable[..., None]):
        self.indexer, self.job, self.plans, self.emit = indexer, job, plans, emit
        self.runners: dict[str, EmbedRunner | None] = {}
        self.providers: Counter[str] = Counter()
        self.done = 0
        self.share = 0.0  # of the project's bytes walked, up to the window being planned
        self.embed_started: float | None = None

    @property
    def planned(self) -> int:
        return sum(p.embedded for p in self.plans.values())

    @property
    def reused(self) -> int:
        return sum(p.reused for p in self.plans.values())

    @property
    def carried(self) -> int:
        return sum(p.carried for p in self.plans.values())

    def total(self) -> int:
        planned = self.planned
        if self.share >= 1.0 or self.share <= 0.0:
            return planned
        return max(planned, round(planned / self.share))

    def walked(self, found: Discovery, share: float, **changes: Any) -> None:
        """The walk has read `share` of the project's bytes, and every chunk in it is planned."""
        self.share = share
        self.emit(
            files=found.files,
            skipped=found.skipped,
            chunks_total=self.total(),
            chunks_reused=self.reused,
            chunks_carried=self.carried,
            **changes,
        )

    async def window(self, chunks: list[Chunk], found: Discovery, share: float) -> None:
        """Plan a window for every table (carrying what can be carried), then embed the rest:
        the vectors that cost nothing are written before any that cost an encoder's time.
        `share`: of the project's bytes, what the walk had read up to this window's end."""
        ix, job = self.indexer, self.job
        by_table: dict[str, list[Chunk]] = {t: [] for t in self.plans}
        for chunk in chunks:
            by_table[chunk.table].append(chunk)
        todo: dict[str, list[Chunk]] = {}
        carried = self.carried
        for table, got in by_table.items():
            if got:
                await job.checkpoint()
                todo[table] = await asyncio.to_thread(ix.admit, job, self.plans[table], got)
        reusing = {"phase": "reusing vectors"} if self.carried > carried else {}
        self.walked(found, share, **reusing)
        for table, rows in todo.items():
            if not rows:
                continue
            if self.embed_started is None:
                # Load the model before the clock starts: a rate that includes a one-off load
                # would mislead the ETA. Only in-process encoders have a `load`.
                load = getattr(ix.encoder, "load", None)
                if callable(load):
                    self.emit(phase="loading model", chunks_total=self.total())
                    await asyncio.to_thread(load)
                self.embed_started = ix.clock()
            self.emit(
                phase="embedding",
                chunks_total=self.total(),
                chunks_reused=self.reused,
                chunks_carried=self.carried,
            )
            if table not in self.runners:
                self.runners[table] = ix.runner_for(table)
            await ix.embed(job, self.plans[table], self.runners[table], rows, self.on_batch)

    def on_batch(self, n: int, provider_id: str) -> None:
        self.done += n
        self.providers[provider_id] += n
        spent = max(self.indexer.clock() - (self.embed_started or 0.0), 1e-9)
        rate = self.done / spent
        total = self.total()
        self.emit(
            phase="embedding",
            chunks_done=self.done,
            chunks_total=total,
            rate=rate,
            eta_s=(total - self.done) / rate if rate > 0 else None,
        )
