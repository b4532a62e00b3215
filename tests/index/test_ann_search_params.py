"""The IVF-PQ search parameters of a big LanceDB table: chosen by the table's rows (the sweep in
docs/benchmarks.md), unless the operator set them (FATHOM_ANN_NPROBES, FATHOM_ANN_CANDIDATES).

The store's real vector search runs on a real LanceDB table with its IVF-PQ index; what it
asks LanceDB for (partitions probed, refine factor) is read at LanceDB's query builder.
"""

from __future__ import annotations

import numpy as np
import pytest
from lancedb.query import LanceVectorQueryBuilder

from fathom.config import Settings
from fathom.errors import ConfigError
from fathom.index.backend import open_store
from fathom.index.store import LanceStore, Slot, ann
from fathom.space import Provenance, Space
from tests.index.store_fixtures import clustered, make_chunks

WIDTH = 32
SPACE = Space("code", "m", WIDTH, "local:m")
PROV = Provenance("local:m", None)


def test_the_per_size_defaults_are_the_swept_ones():
    """Narrow vectors: 8 probes and 300 candidates up to 1M rows (1M x 384: recall@10 0.997 at
    17 ms, against 0.991 at 27 ms for the 32 probes and 200 candidates before), then a probe
    more per 125k rows. Wide vectors keep their width's settings (measured at 200k x 2560)."""
    assert ann.search_params(384, 20_000) == (8, 300)
    assert ann.search_params(384, 300_000) == (8, 300)
    assert ann.search_params(384, 1_000_000) == (8, 300)
    assert ann.search_params(384, 1_000_001) == (9, 300)
    assert ann.search_params(384, 2_000_000) == (16, 300)
    assert ann.search_params(2560, 200_000) == (16, 400)
    assert ann.search_params(2560, 5_000_000) == (16, 400)


@pytest.fixture
def asked(monkeypatch):
    """(nprobes, refine_factor) of every vector query the store hands LanceDB, as the store
    sets them through the query builder's public methods (None: left unset)."""
    seen: list[tuple[int | None, int | None]] = []
    set_on: dict[int, dict[str, int]] = {}
    originals = {
        name: getattr(LanceVectorQueryBuilder, name) for name in ("nprobes", "refine_factor", "to_arrow")
    }

    def setter(name):
        def spy(self, value):
            set_on.setdefault(id(self), {})[name] = value
            return originals[name](self, value)

        return spy

    def to_arrow(self, *args, **kwargs):
        values = set_on.pop(id(self), {})
        seen.append((values.get("nprobes"), values.get("refine_factor")))
        return originals["to_arrow"](self, *args, **kwargs)

    monkeypatch.setattr(LanceVectorQueryBuilder, "nprobes", setter("nprobes"))
    monkeypatch.setattr(LanceVectorQueryBuilder, "refine_factor", setter("refine_factor"))
    monkeypatch.setattr(LanceVectorQueryBuilder, "to_arrow", to_arrow)
    return seen


def _indexed(store: LanceStore, n: int) -> np.ndarray:
    """A promoted table of `n` clustered rows with its IVF-PQ index built; its vectors."""
    vecs = clustered(n, width=WIDTH, clusters=24, seed=7, spread=0.3)
    store.begin_shadow("p", "code", SPACE)
    store.write("p", "code", make_chunks(n), vecs, PROV, slot=Slot.SHADOW)
    store.promote("p", "code")
    assert store.wait_for_ann(timeout=120)
    return vecs


def test_the_store_searches_with_the_parameters_of_the_table_s_size(tmp_path, monkeypatch, asked):
    """The same rule at a scale a test can build (a probe per 100 rows): the table growing
    between two searches (rows written to the active table) changes what its next one asks."""
    monkeypatch.setattr(ann, "PROBES", 2)
    monkeypatch.setattr(ann, "PROBED_ROWS_PER_PROBE", 100)
    store = LanceStore(tmp_path, matrix_cache_bytes=0, ann_min_rows=500)
    vecs = _indexed(store, 1_200)
    assert store.vector_search("p", "code", vecs[0], 10)[0].score > 0.99
    assert asked[-1] == (12, 30)  # 1,200 rows: 12 probes, 300 candidates at k=10
    more = clustered(400, width=WIDTH, clusters=24, seed=8, spread=0.3)
    store.write("p", "code", make_chunks(400, prefix="more"), more, PROV)
    store.vector_search("p", "code", vecs[0], 10)
    assert asked[-1] == (16, 30)  # 1,600 rows: 16 probes
    store.vector_search("p", "code", vecs[0], 40)
    assert asked[-1] == (16, 8)  # the candidates are rows, whatever k


def test_the_operator_s_settings_win_at_every_size(tmp_path, monkeypatch, asked):
    """FATHOM_ANN_NPROBES / FATHOM_ANN_CANDIDATES reach the store `open_store` opens, and a
    set value wins over the per-size default; one left unset keeps it."""
    monkeypatch.setenv("FATHOM_ANN_NPROBES", "3")
    monkeypatch.setenv("FATHOM_MATRIX_CACHE_BYTES", "0")
    store = open_store(Settings(data_dir=tmp_path))
    assert isinstance(store, LanceStore) and store.ann_nprobes == 3 and store.ann_candidates is None
    store.ann.min_rows = 500  # as a production-size table is (20k rows and up)
    vecs = _indexed(store, 1_200)
    store.vector_search("p", "code", vecs[0], 10)
    assert asked[-1] == (3, 30)  # probes set, candidates by size
    store.ann_candidates = 50
    store.vector_search("p", "code", vecs[0], 10)
    assert asked[-1] == (3, 5)


@pytest.mark.parametrize(
    ("variable", "value"),
    [("FATHOM_ANN_NPROBES", "0"), ("FATHOM_ANN_CANDIDATES", "5"), ("FATHOM_ANN_NPROBES", "many")],
)
def test_a_bad_ann_setting_is_a_config_error_naming_it(monkeypatch, tmp_path, variable, value):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as err:
        Settings(data_dir=tmp_path)
    assert variable in str(err.value) and "docs/configuration.md" in str(err.value)
