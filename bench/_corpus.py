"""The synthetic clustered corpus the search benchmarks write: rows, vectors and words.

Rows are clustered (recall on uniform random vectors means nothing): C cluster centres, each
row a centre plus noise, L2-normalised; queries are fresh draws around the same centres. Chunk
texts draw words from a Zipf law over a vocabulary (the 30 real words first). It owns no
measurement; bench/search_latency.py and bench/ann_build.py measure with it.
"""

from __future__ import annotations

import numpy as np

from fathom.index.chunk import Chunk

WORDS = (
    "parse render retry cache token stream buffer index query vector table column "
    "socket request response handler config logger thread queue batch encode decode "
    "hash password invoice tax progress syntax markdown layout style"
).split()


def vocabulary(size: int) -> tuple[np.ndarray, np.ndarray]:
    """`size` words (the real ones first, then synthetic identifiers) and Zipf weights."""
    words = np.array(WORDS + [f"ident{i}" for i in range(max(0, size - len(WORDS)))])[:size]
    if size <= len(WORDS):
        return words, np.full(len(words), 1 / len(words))
    weights = 1.0 / np.arange(1, len(words) + 1) ** 1.05
    return words, weights / weights.sum()


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def rows_for(start: int, labels: np.ndarray, words: list[str]) -> list[Chunk]:
    out = []
    for j, c in enumerate(labels.tolist()):
        i = start + j
        text = " ".join(words[6 * j : 6 * j + 6])
        out.append(
            Chunk(
                path=f"pkg/mod_{i // 40}.py",
                language="python",
                table="code",
                start_line=(i % 40) * 10 + 1,
                end_line=(i % 40) * 10 + 9,
                symbol=f"func_{i}",
                text=f"def func_{i}():\n    # cluster {c}: {text}\n",
            )
        )
    return out
