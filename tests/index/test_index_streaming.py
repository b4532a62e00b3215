"""An index job streams: a project many times larger than the indexer's window is indexed
with at most two windows of chunks (and one file's) alive at any moment, and vectors a batch
at a time, through the real walker, chunker, store and MiniLM encoder. Counted by weak
references to every chunk the walk yields and every vector batch the encoder returns, so the
bound does not depend on timing or on the process's RSS. What needs the whole project (rows
of deleted files, moved text carried by content, the progress total) stays right across
windows."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest

from fathom.index.indexer import Discovery, Indexer
from fathom.index.store import LanceStore, Slot
from fathom.inference.provider import Provider

WINDOW = 25
FILES = 30
PER_FILE = 20  # functions per file: one code chunk each


class Live:
    """How many of the objects added are still alive (each counted off when it is freed)."""

    def __init__(self) -> None:
        self.n = 0

    def add(self, obj: object) -> None:
        self.n += 1
        weakref.finalize(obj, self._gone)

    def _gone(self) -> None:
        self.n -= 1


class Watched:
    """What is alive: every chunk the walk yielded and every vector batch an encoder returned,
    weakly held, and the most of each alive whenever the encoder is called."""

    def __init__(self) -> None:
        self.chunks, self.vectors = Live(), Live()
        self.max_chunks = self.max_vectors = self.calls = 0

    def discovery(self, root: Path, **kw) -> Discovery:
        watched = self

        class _Watched(Discovery):
            def __iter__(self):
                for chunk in super().__iter__():
                    watched.chunks.add(chunk)
                    yield chunk

        # No chunk cache: it holds chunks of its own (bounded by their text, 64 MiB).
        return _Watched(root, cache=None, **kw)

    def encoder(self, inner: Provider) -> Provider:
        watched = self

        class _Watching(Provider):
            def __init__(self) -> None:
                self.info = inner.info
                self.texts = 0

            async def embed(self, texts):
                watched.calls += 1
                if watched.chunks.n > 2 * WINDOW + PER_FILE or watched.vectors.n > 2:
                    # What is alive, not garbage the cycle collector has not reached yet (a
                    # window's chunks in a reference cycle outlive it until a collection).
                    gc.collect()
                watched.max_chunks = max(watched.max_chunks, watched.chunks.n)
                watched.max_vectors = max(watched.max_vectors, watched.vectors.n)
                self.texts += len(texts)
                vectors = await inner.embed(texts)
                watched.vectors.add(vectors)
                return vectors

        return _Watching()


def write_corpus(root: Path) -> None:
    for f in range(FILES):
        body = "\n\n".join(
            f"def step_{f}_{j}(value):\n    total = value * {j} + {f}\n    return total - {j % 5}\n"
            for j in range(PER_FILE)
        )
        (root / f"pkg{f // 10}").mkdir(parents=True, exist_ok=True)
        (root / f"pkg{f // 10}" / f"mod_{f:02d}.py").write_text(body)
    for d in range(3):
        (root / f"pkg{d}" / "README.md").write_text(
            f"# Package {d}\n\nSteps that scale a value.\n\n## Usage\n\nCall step {d} with a value.\n"
        )


@pytest.fixture
def store(tmp_path: Path) -> LanceStore:
    s = LanceStore(tmp_path / "lance")
    yield s
    s.close()


async def test_a_project_24_windows_long_is_indexed_a_window_at_a_time(tmp_path, store, local_encoder):
    root = tmp_path / "proj"
    write_corpus(root)
    watched = Watched()
    encoder = watched.encoder(local_encoder)
    indexer = Indexer(store, encoder, batch_size=16, window=WINDOW, discover_fn=watched.discovery)
    events = []
    report = await indexer.run(indexer.job("big", root), events.append)

    # Everything was indexed, each chunk once, into both tables.
    code_chunks = FILES * PER_FILE
    assert report.files == FILES + 3
    assert report.tables["code"] == code_chunks and report.tables["docs"] > 0
    assert report.chunks == report.embedded == encoder.texts == sum(report.tables.values())
    assert report.chunks >= 20 * WINDOW

    # Bounded: never more than two windows of chunks (the one embedded, the one the walk is
    # reading) and one file's alive, nor more than a few vector batches.
    assert watched.calls >= report.chunks // 16
    assert watched.max_chunks <= 2 * WINDOW + PER_FILE, watched.max_chunks
    assert watched.max_vectors <= 2, watched.max_vectors

    # Progress: while the walk was still going the total was extrapolated from the bytes
    # walked (this corpus is uniform: within a fifth of the truth), then exact at the end.
    embedding = [e for e in events if e.phase == "embedding"]
    early = [e for e in embedding if 0 < e.chunks_done <= report.chunks // 4]
    seen = [(e.chunks_done, e.chunks_total) for e in early]
    assert early and all(abs(t - report.chunks) <= report.chunks // 5 for _, t in seen), seen
    assert any(e.eta_s is not None and e.chunks_done < e.chunks_total for e in early)
    assert embedding[-1].chunks_done == embedding[-1].chunks_total == report.embedded

    # An incremental run across windows: a file deleted near the start (its rows are known
    # stale only once the walk has ended), a file renamed to the end (its text carried by
    # content, not embedded), one function changed.
    (root / "pkg0" / "mod_01.py").unlink()
    (root / "pkg0" / "mod_02.py").rename(root / "pkg2" / "zz_moved.py")
    last = root / "pkg2" / "mod_29.py"
    last.write_text(last.read_text().replace("return total - 4", "return total + 40", 1))
    watched = Watched()
    encoder = watched.encoder(local_encoder)
    indexer = Indexer(store, encoder, batch_size=16, window=WINDOW, discover_fn=watched.discovery)
    again = await indexer.run(indexer.job("big", root))
    assert again.embedded == encoder.texts == 1
    assert again.carried == PER_FILE
    assert again.deleted == PER_FILE + 1  # the deleted file's rows and the changed function's
    assert again.tables["code"] == code_chunks - PER_FILE
    assert watched.max_chunks <= 2 * WINDOW + PER_FILE, watched.max_chunks
    paths = {e.path for e in store.manifest("big", "code", Slot.ACTIVE)}
    assert "pkg0/mod_01.py" not in paths and "pkg0/mod_02.py" not in paths
    assert "pkg2/zz_moved.py" in paths
