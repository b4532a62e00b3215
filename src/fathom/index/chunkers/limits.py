"""The size bounds of one chunk, in characters and lines (`Limits`), and the constants they
default to. Token bounds are `tokens.fit_tokens`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

# A chunk should fit an encoder's context window: MiniLM reads 256 word pieces, which is
# roughly 1000-1500 characters of code. Bigger units are cut into overlapping windows; with a
# `TokenCounter` (the encoder's own tokenizer) every chunk is then held to its token limit.
MAX_CHARS = 1500
MAX_LINES = 60
OVERLAP_LINES = 5
# Line windows for files without a grammar or headings.
WINDOW_LINES = 40
# A fragment with fewer non-blank characters than this ("}", "end", one import) says too
# little to be worth its own vector, so it joins a neighbour when the result still fits.
TINY_CHARS = 40
# Nesting deeper than this is treated as one opaque unit: recursion must stay bounded on
# adversarial input.
MAX_DEPTH = 24


@dataclass(frozen=True)
class Limits:
    """Size bounds of one chunk; a unit over either bound is cut into windows."""

    max_chars: int = MAX_CHARS
    max_lines: int = MAX_LINES
    overlap: int = OVERLAP_LINES
    window_lines: int = WINDOW_LINES

    def __post_init__(self) -> None:
        # Bounds this small would make windows that never advance or never fit a line.
        object.__setattr__(self, "max_chars", max(self.max_chars, 80))
        object.__setattr__(self, "max_lines", max(self.max_lines, 4))
        object.__setattr__(self, "window_lines", max(min(self.window_lines, self.max_lines), 2))
        object.__setattr__(self, "overlap", max(0, min(self.overlap, self.window_lines // 2)))
