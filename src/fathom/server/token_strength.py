"""How strong a token the operator chooses must be: FATHOM_ADMIN_TOKEN, FATHOM_JOIN_TOKEN,
FATHOM_METRICS_TOKEN, and `fathom serve`'s FATHOM_MCP_TOKEN or `--token-file`.

The tokens Fathom issues are 256 random bits. One the operator sets instead is kept only as a
SHA-256 hash, so a weak one falls to an offline guess as soon as the hash is read, and to an
online one anyway. `check_chosen_token` refuses it at start, before anything listens or is
written, with a `WeakToken` that names the setting and the reason and says how to make one:

- shorter than `MIN_CHOSEN_TOKEN_CHARS` (24) characters;
- made of fewer than `MIN_DISTINCT_CHARS` (10) different characters (`acgtgcatgca…`);
- fewer than `MIN_BITS` (80) bits by the estimate below (repeats, keyboard walks, sequences such
  as `abcdef123456`, dates, dictionary words and their l33t or reversed spellings);
- `MAX_WORD_SHARE` (40 %) or more of it dictionary words of four letters or more, the words a
  person builds a memorable token from, with fewer than `MIN_REST_BITS` (72) bits in the rest
  (`correct-horse-battery-staple-7Kq2`): a long phrase can pass the estimate, whose words are
  priced one by one, while an attacker tries phrases whole.

The estimate: zxcvbn's matchers (a maintained password-strength library, with its frequency
lists of passwords, English words and names, plus Fathom's own words) find every guessable
piece; the token's cost is the cheapest way to spell it from those pieces and random characters,
a random character costing log2 of the alphabet its classes span (16 for hex). zxcvbn's own
score is made for passwords and prices a random character at 10 guesses, so a random 24-character
token would score like a weak one. Measured on 1,500 tokens each: `secrets.token_urlsafe(32)`
and `openssl rand -hex 32` never under 170 bits and never refused, a UUID4 never under 100;
128-bit ones (`token_hex(16)`, 24 random letters and digits) are refused once or twice in a
thousand (an unlucky draw full of words or keypad walks), and are told to make another.

It refuses to see the token as anything but a string in memory: the error carries the setting,
the reason and the estimate, never the value or a piece of it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from fathom.errors import ConfigError

MIN_CHOSEN_TOKEN_CHARS = 24
MIN_BITS = 80
MAX_WORD_SHARE = 0.4
MIN_REST_BITS = 72
MIN_DISTINCT_CHARS = 10
MAKE_ONE = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
# Words an operator reaches for when naming a Fathom token, cheapest first.
PRODUCT_WORDS = (
    "fathom",
    "admin",
    "token",
    "join",
    "sidecar",
    "metrics",
    "scrape",
    "mcp",
    "server",
    "serve",
    "secret",
    "key",
    "fleet",
    "search",
    "code",
    "prod",
    "production",
    "dev",
    "test",
)
_WINDOW = 64  # zxcvbn takes at most 72 characters: a longer token is priced window by window
_WORD_CHARS = 4
_HEX = re.compile(r"[0-9a-f]+|[0-9A-F]+")


class WeakToken(ConfigError):
    """A token the operator chose is too easy to guess; nothing was started or written."""

    def __init__(self, setting: str, reason: str, bits: float | None = None, *, instead: str | None = None):
        self.setting, self.reason, self.bits = setting, reason, bits
        message = (
            f"{setting} {reason}. Use a random one, e.g. `{MAKE_ONE}`, or {instead or f'unset {setting}'} "
            f"to have the server issue one"
        )
        super().__init__(message, [message])


def alphabet_bits(token: str) -> float:
    """log2 of the alphabet a random character of `token` is drawn from, by the classes it uses
    (hex alone counts 16; each symbol it uses counts one)."""
    if _HEX.fullmatch(token.replace("-", "")):
        return 4.0
    size = (
        26 * any(c.islower() for c in token)
        + 26 * any(c.isupper() for c in token)
        + 10 * any(c.isdigit() for c in token)
        + len({c for c in token if not c.isalnum()})
    )
    return math.log2(max(size, 2))


def _dictionaries() -> dict[str, Any]:
    from zxcvbn import matching

    return {**matching.RANKED_DICTIONARIES, "fathom": matching.build_ranked_dict(PRODUCT_WORDS)}


@dataclass(frozen=True)
class Estimate:
    """How guessable a token is: `bits` in all, the `word_share` of its characters spelled by
    dictionary words, and the `rest_bits` of everything but those words."""

    bits: float = 0.0
    word_share: float = 0.0
    rest_bits: float = 0.0


def _cheapest(window: str, per_char: float, dictionaries: dict[str, Any]) -> tuple[float, int, float]:
    """(bits, characters spelled by dictionary words, bits of the rest) of the cheapest spelling
    of `window`: a shortest path over its characters, each step a random character or a piece."""
    from zxcvbn import matching, scoring

    ending: dict[int, list[tuple[int, float, bool]]] = {}
    for match in matching.omnimatch(window, dictionaries):
        bits = math.log2(max(float(scoring.estimate_guesses(match, window)), 1.0))
        word = match["pattern"] == "dictionary" and match["j"] - match["i"] + 1 >= _WORD_CHARS
        ending.setdefault(match["j"], []).append((match["i"], bits, word))
    best = [(0.0, 0, 0.0)]  # per prefix length: (bits, word characters, rest bits)
    for j in range(1, len(window) + 1):
        cost, words, rest = best[j - 1]
        step = (cost + per_char, words, rest + per_char)
        for i, bits, word in ending.get(j - 1, ()):
            cost, words, rest = best[i]
            if cost + bits < step[0]:
                step = (cost + bits, words + (j - i), rest) if word else (cost + bits, words, rest + bits)
        best.append(step)
    return best[-1]


def estimate(token: str) -> Estimate:
    """How guessable `token` is (zxcvbn's pieces, priced as the module docstring says)."""
    if not token:
        return Estimate()
    per_char, dictionaries = alphabet_bits(token), _dictionaries()
    bits, words, rest = 0.0, 0, 0.0
    for start in range(0, len(token), _WINDOW):
        window = _cheapest(token[start : start + _WINDOW], per_char, dictionaries)
        bits, words, rest = bits + window[0], words + window[1], rest + window[2]
    return Estimate(bits, words / len(token), rest)


def check_chosen_token(setting: str, value: str | None, *, instead: str | None = None) -> str | None:
    """`value`, a token the operator chose (FATHOM_ADMIN_TOKEN and the like), if it is strong
    enough to resist guessing; a `WeakToken` naming `setting` (never the value) otherwise.
    `instead`: how to do without it, when that is not to unset `setting`."""
    if value is None:
        return None
    if len(value) < MIN_CHOSEN_TOKEN_CHARS:
        raise WeakToken(
            setting,
            f"is too short ({len(value)} characters; at least {MIN_CHOSEN_TOKEN_CHARS}): a "
            f"short token can be guessed",
            instead=instead,
        )
    found = estimate(value)
    if found.bits < MIN_BITS:
        raise WeakToken(
            setting,
            f"is too easy to guess: about 2^{int(found.bits)} tries find it (repeats, "
            f"sequences, keyboard walks or common words; at least 2^{MIN_BITS} are needed)",
            found.bits,
            instead=instead,
        )
    if len(set(value)) < MIN_DISTINCT_CHARS:
        raise WeakToken(
            setting,
            f"is too easy to guess: it uses only {len(set(value))} different characters (at "
            f"least {MIN_DISTINCT_CHARS})",
            found.bits,
            instead=instead,
        )
    if found.word_share >= MAX_WORD_SHARE and found.rest_bits < MIN_REST_BITS:
        raise WeakToken(
            setting,
            f"is too easy to guess: {round(found.word_share * 100)} % of it is dictionary "
            f"words, and the rest holds about 2^{int(found.rest_bits)} guesses",
            found.bits,
            instead=instead,
        )
    return value
