"""An in-memory keyword index kept beside a cached matrix: BM25 over term postings.

What it owns: the keyword half of a search over a table the matrix cache holds. LanceDB's
full-text search costs 3-5 ms a query on a 20k-row table, mostly per call (planning, I/O,
decoding the hit columns), so a search over 50 projects spent a quarter of a second on it.
This index answers the same query from numpy arrays in a fraction of a millisecond.

It ranks as LanceDB's FTS index does (the one `fathom.index.store` creates: LanceDB's
defaults but for positions and the stop words, which are this module's list), so a table
ranks the same whether the cache holds it or not:

* tokens: split on every character that is not a letter or a digit, lower-cased, tokens of
  40 bytes or more dropped, stemmed (Snowball English: PyStemmer is the C build of the
  same algorithm LanceDB's Rust stemmer runs), then stop words dropped (compared after
  stemming, as LanceDB does; `STOP_WORDS`, the list the store hands LanceDB, so no LanceDB
  release's own list decides it), then accents folded to ASCII;
* score: BM25 with k1 = 1.2, b = 0.75, idf = ln(1 + (N - n + 0.5) / (n + 0.5)), the
  document length counted in kept tokens, float32 like LanceDB's; a query term counts once
  per occurrence in the query; any matching term makes a row a candidate (OR).

tests/index/test_keywords.py checks that the two agree, scores and order, on real code.

What it refuses to do: phrase queries (positions are not indexed, as in the store), or
index a row twice.

API:
    KeywordIndex.build(texts: pa.Array | Sequence[str]) -> KeywordIndex
    index.search(query, k, *, rows=None) -> (row numbers, scores)   best first
    index.nbytes
    terms(text) -> list[str]     the tokens a text is indexed under
"""

from __future__ import annotations

import functools
import re
import sys
import threading
import unicodedata
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

K1 = np.float32(1.2)
B = np.float32(0.75)
MAX_TOKEN_BYTES = 40  # LanceDB's default max_token_length: longer tokens are not indexed
_SPLIT = r"[^\p{L}\p{N}]+"
_WORD = re.compile(r"[^\W_]+")
# The words a keyword index leaves out, compared with the *stemmed* token (so "ourselves",
# stemmed to "ourselv", is kept while "the" is dropped). The store gives LanceDB this list
# (`custom_stop_words`) instead of letting each release use its own: 0.41 stopped dropping
# negations and the pieces of contractions ("not", "don"), which code search wants kept, and
# an upgrade must not change what a table's keyword half finds. It is LanceDB 0.41's English
# list; tests/index/test_keywords.py reads it back from a real LanceDB index.
STOP_WORDS = frozenset(
    """
    i me my myself we our ours you your yours yourself he him his himself she her hers
    herself it its itself they them their theirs what which who whom this that these those
    am is are was were be been being have has had having do did doing should a an the and
    but if or as until while of at by for with about against between into through after
    below to from up down in out on off over under again further then here there when where
    how all both each few more most other some such own same so than too can will just now re
""".split()
)


_local = threading.local()


class _Stemmer(Protocol):
    """What is used of a PyStemmer `Stemmer` (the package ships no types)."""

    def stemWord(self, word: str) -> str: ...  # noqa: N802 - PyStemmer's name


def _stemmer() -> _Stemmer:
    """This thread's stemmer: a PyStemmer object must not be shared between threads, and
    tables load (and queries run) on several at once."""
    stemmer: _Stemmer | None = getattr(_local, "stemmer", None)
    if stemmer is None:
        import Stemmer  # PyStemmer: Snowball's C stemmers

        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    return stemmer


@functools.lru_cache(maxsize=200_000)
def _term(token: str) -> str | None:
    """The indexed form of one lower-cased token, or None when it is not indexed."""
    if not token or len(token.encode()) >= MAX_TOKEN_BYTES:
        return None
    stem = _stemmer().stemWord(token)
    if stem in STOP_WORDS:
        return None
    if not stem.isascii():
        stem = "".join(c for c in unicodedata.normalize("NFKD", stem) if not unicodedata.combining(c))
    return stem


def _tokens(texts: pa.Array) -> pa.ListArray:
    """Every text's tokens, lower-cased (Arrow's regex split: one pass over a whole table)."""
    return pc.split_pattern_regex(pc.utf8_lower(texts), pattern=_SPLIT)


def terms(text: str) -> list[str]:
    """The terms `text` is indexed (or queried) under, in order, repeats kept. A query is
    split by Python's `re` (Arrow compiles its pattern on every call, ~2 ms); `[^\\W_]` is
    the same class of letters and digits as the `_SPLIT` the table's texts are split by."""
    return [t for t in map(_term, _WORD.findall(text.lower())) if t is not None]


class KeywordIndex:
    """Postings of one table: for each term, the rows holding it and each row's BM25 weight
    for it (everything but the idf), so a query is a few gathers and adds."""

    def __init__(
        self,
        vocab: dict[str, int],
        offsets: np.ndarray,
        rows: np.ndarray,
        weights: np.ndarray,
        idf: np.ndarray,
        n_rows: int,
    ):
        self.vocab, self.offsets, self.rows, self.weights = vocab, offsets, rows, weights
        self.idf, self.n_rows = idf, n_rows
        # Counted once: the cache sums its entries' sizes whenever it makes room. The
        # vocabulary is a Python dict of str, its entries and keys counted too.
        words = sys.getsizeof(vocab) + sum(sys.getsizeof(w) for w in vocab)
        self.nbytes = int(offsets.nbytes + rows.nbytes + weights.nbytes + idf.nbytes + words)

    @classmethod
    def build(cls, texts: pa.Array | pa.ChunkedArray | Sequence[str]) -> KeywordIndex:
        if isinstance(texts, pa.ChunkedArray):
            texts = texts.combine_chunks()
        elif not isinstance(texts, pa.Array):
            texts = pa.array(list(texts), pa.string())
        n = len(texts)
        lists = _tokens(texts.cast(pa.string()))
        lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
        owner = np.repeat(np.arange(n, dtype=np.int64), lengths)
        encoded = pc.dictionary_encode(lists.flatten())
        raw_ids = encoded.indices.to_numpy(zero_copy_only=False)
        vocab: dict[str, int] = {}
        # Each distinct raw token is stemmed once; -1 marks a token that is not indexed.
        term_of_raw = np.array(
            [
                vocab.setdefault(t, len(vocab)) if t is not None else -1
                for t in map(_term, encoded.dictionary.to_pylist())
            ]
            or [-1],
            dtype=np.int64,
        )
        term_ids = term_of_raw[raw_ids] if len(raw_ids) else raw_ids.astype(np.int64)
        kept = term_ids >= 0
        term_ids, owner = term_ids[kept], owner[kept]
        doc_len = np.bincount(owner, minlength=n).astype(np.float32)
        n_terms = len(vocab)
        pairs, tf = np.unique(term_ids * max(n, 1) + owner, return_counts=True)
        term_col, rows = np.divmod(pairs, max(n, 1))
        avgdl = np.float32(doc_len.sum() / n) if n else np.float32(1.0)
        tf = tf.astype(np.float32)
        norm = K1 * (np.float32(1.0) - B + B * doc_len[rows] / avgdl)
        weights = ((K1 + np.float32(1.0)) * tf / (tf + norm)).astype(np.float32)
        df = np.bincount(term_col, minlength=n_terms).astype(np.float32)
        offsets = np.concatenate([[0], np.cumsum(df.astype(np.int64))])
        idf = np.log(
            (np.float32(n) - df + np.float32(0.5)) / (df + np.float32(0.5)) + np.float32(1.0)
        ).astype(np.float32)
        return cls(vocab, offsets, rows.astype(np.int32), weights, idf, n)

    def search(self, query: str, k: int, *, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The best `k` rows for `query` (only among the row numbers `rows` when given: the
        store's filter), best first; equal scores in row order."""
        ids = [self.vocab[t] for t in terms(query) if t in self.vocab]
        if not ids or k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        scores = np.zeros(self.n_rows, np.float32)
        for t in ids:  # a term's rows are distinct, so one fancy add per term is exact
            span = slice(self.offsets[t], self.offsets[t + 1])
            scores[self.rows[span]] += self.weights[span] * self.idf[t]
        if rows is not None:
            allowed = np.zeros(self.n_rows, bool)
            allowed[rows] = True
            scores[~allowed] = 0.0
        cand = np.flatnonzero(scores)  # every matching row scores above 0 (idf > 0)
        k = min(k, len(cand))
        if k == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        top = cand[np.argpartition(-scores[cand], k - 1)[:k]] if k < len(cand) else cand
        top = top[np.lexsort((top, -scores[top]))]
        return top.astype(np.int64), scores[top]
