"""Fusing the vector ranking and the keyword ranking into one, adapted to the query.

What it owns: reading a query's shape (`QueryShape`: how much of it is code — identifiers,
dotted names, paths, quoted strings, backticks — and which names and paths it spells out),
and fusing a search's two best-first lists into one ranking (`fuse`):

    fused(d) = (1 - w) * v(d) + w * t(d)  +  name and path boosts

where v and t are the vector (cosine) and keyword (BM25 or ts_rank) scores of d, each min-max
normalised over its own list (0 for a chunk the list does not hold), and w, the keyword
weight, comes from the query's shape: `NATURAL_WEIGHT` for plain language, `CODE_WEIGHT` when
the query carries code. A chunk whose symbol the query names (`build_request`,
`Client.send`, "`GZipDecoder` decode") gets `SYMBOL_BOOST`, more when more of its dotted
parts are named, and a chunk in a file the query names (`_transports/default.py`) gets
`PATH_BOOST`, so a query naming a definition finds it first. The boosts apply in full to a
short query (a lookup) and in proportion to its code to a long sentence that only mentions
a name. A definition too long for one chunk is cut into windows; its first window (the one
with the signature) is shown first, at the group's best score.

Why this and not reciprocal rank fusion (RRF), measured by `bench/search_quality.py`: RRF
adds 1/(60 + rank) from each list, so ranks 1, 2 and 3 are worth almost the same and any
keyword agreement reorders the vector half's head. On natural-language questions, where
MiniLM is strong and BM25 weak, that cost 0.09 MRR@10 against the vector half alone. A
convex combination of normalised scores keeps the vector half's margins (a clear first stays
first), and the query's shape decides how far the keyword half may move it; identifiers
lean on keywords, where BM25 is the stronger half. Weighted RRF with the same weights was
measured too and lost on both kinds of query (docs/benchmarks.md).

Everything here works on the `Hit`s a `Store` returns, so LanceDB and PostgreSQL rank the
same way; only their keyword scores differ in scale, which the normalisation absorbs.

It refuses to compare raw scores across the two lists (cosine and BM25 live on different
scales), to boost a name the query does not spell as code (a plain word such as "read" in
"read a file" names no definition), and to drop a hit of either list.

API:
    query_shape(query) -> QueryShape
    fuse(vector_hits, text_hits, query, *, limit=None) -> list[Hit]
    rrf_fuse(rankings, *, k=60, limit=None) -> list[Hit]     the previous rule, for comparison
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass

from fathom.index.store import CAMEL_PARTS as _CAMEL_PARTS  # the keyword index's own word split
from fathom.index.store import Hit

# Keyword weights, chosen on bench/search_quality.py (docs/benchmarks.md has the sweep).
NATURAL_WEIGHT = 0.2
CODE_WEIGHT = 0.6
SYMBOL_BOOST = 1.25  # strictly above any fused score (those lie in [0, 1]), ties included
SYMBOL_PART_BOOST = 0.5  # per further dotted part named: `GZipDecoder.decode` over `GZipDecoder`
PATH_BOOST = 0.5
SHORT_QUERY = 6  # tokens: a query this short that names a definition is looking it up
RRF_K = 60  # Cormack et al.'s constant, for rrf_fuse

_TOKEN = re.compile(r"`[^`]+`|\"[^\"]+\"|'[^'\s]+'|\S+")
_STRIP = "`\"'.,;:!?()[]{}<>"
_EXTENSIONS = re.compile(
    r"\.(py|pyi|js|jsx|mjs|ts|tsx|go|rs|java|kt|c|h|cc|cpp|hpp|cs|rb|php|swift|scala|sh|sql|"
    r"md|rst|txt|toml|yaml|yml|json|html|css)$",
    re.IGNORECASE,
)
_CAMEL = re.compile(r"[a-z0-9][A-Z]|[A-Z]{2,}[a-z]")
_HEADER = re.compile(r"^[A-Z][a-z]+(-[A-Z][a-z]*)+$")  # Retry-After, Content-Encoding
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Keywords that introduce a definition: the next token is a name (`def parse`, `class Timeout`).
# English words ("function", "method", "type") are left out: "python function to read csv"
# is a question, not a lookup. A class name must be capitalised ("class of problems" names
# nothing).
_DEFINER = {"def", "class", "func", "fn", "struct", "interface", "trait", "enum", "impl"}
_NAMELIKE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*[:(]?$")


@dataclass(frozen=True)
class QueryShape:
    """What a query looks like: how much of it is code, and the names and paths it spells."""

    tokens: int  # whitespace-separated tokens (a back-ticked or quoted span is one)
    code_tokens: int  # how many of them look like code
    names: frozenset[str] = frozenset()  # lower-cased identifier parts spelled as code
    words: frozenset[str] = frozenset()  # every lower-cased word and identifier part
    paths: tuple[str, ...] = ()  # path-like tokens, lower-cased
    opening: str = ""  # the first token, lower-cased ("convert", "how", "requestcontext")

    @property
    def is_code(self) -> bool:
        return self.code_tokens > 0

    @property
    def code_share(self) -> float:
        return self.code_tokens / self.tokens if self.tokens else 0.0

    @property
    def keyword_weight(self) -> float:
        return keyword_weight(self)

    @property
    def name_weight(self) -> float:
        return name_weight(self)


def keyword_weight(shape: QueryShape) -> float:
    return CODE_WEIGHT if shape.is_code else NATURAL_WEIGHT


def name_weight(shape: QueryShape) -> float:
    """How far the name and path boosts apply: fully for a short query (naming something in
    a few words is a lookup: "where is build_request defined"); for a long sentence, in
    proportion to how much of it is code ("works like `parse_expression` but a comma makes
    a tuple node" is about another function, one the name only relates to)."""
    if shape.tokens <= SHORT_QUERY:
        return 1.0
    return min(1.0, 3 * shape.code_share)


def _is_path(token: str) -> bool:
    return ("/" in token and any(c.isalnum() for c in token)) or bool(_EXTENSIONS.search(token))


def _quoted(raw: str) -> bool:
    # Back-ticks and double quotes mark code or a literal; a single-quoted span only when it
    # has no space, so the apostrophes of "it's a class (or the object's)" are not a quote.
    if len(raw) < 3 or raw[0] not in "`\"'" or raw[-1] != raw[0]:
        return False
    return raw[0] != "'" or not any(c.isspace() for c in raw)


def _looks_like_code(raw: str, token: str) -> bool:
    if _quoted(raw):
        return True  # the asker means this exact string
    if not token:
        return False
    return (
        "_" in token
        or "()" in raw
        or "::" in token
        or "->" in token
        or bool(_CAMEL.search(token))
        or bool(_HEADER.match(token))
        or bool(re.search(r"[A-Za-z0-9]\.[A-Za-z_]", token))
        or _is_path(token)
    )


def _names_after(definer: str, raw: str) -> bool:
    if not _NAMELIKE.match(raw):
        return False
    return raw[0].isupper() if definer == "class" else raw.lower() not in {"self", "cls", "the", "a"}


def query_shape(query: str) -> QueryShape:
    """Read the query's shape. A lone token counts as a name: one word typed into a code
    search is almost always a symbol (`confirm`, `echo`)."""
    raws = _TOKEN.findall(query or "")
    names: set[str] = set()
    words: set[str] = set()
    paths: list[str] = []
    code = 0
    after_definer = False
    previous = ""
    for raw in raws:
        token = raw.strip(_STRIP)
        parts = [p.lower() for p in _NAME.findall(token)]
        words.update(parts)
        is_code = _looks_like_code(raw, token) or (after_definer and _names_after(previous, raw))
        after_definer = token.lower() in _DEFINER
        previous = token.lower()
        if not is_code:
            continue
        code += 1
        if _is_path(token):
            paths.append(token.lower().lstrip("./"))
            continue
        if len(parts) <= 4:  # a name, dotted or not; a quoted phrase names no definition
            names.update(parts)
    if len(raws) == 1 and not names and not paths:
        token = raws[0].strip(_STRIP)
        names.update(p.lower() for p in _NAME.findall(token))
        code = 1 if names else 0
    opening = raws[0].strip(_STRIP).lower() if raws else ""
    return QueryShape(len(raws), code, frozenset(names), frozenset(words), tuple(paths), opening)


Key = tuple[str | None, str]


def _key(hit: Hit) -> Key:
    """A chunk's identity in a ranking: its id within its project (a search over several
    projects may hold one chunk id twice, e.g. a vendored file)."""
    return hit.project, hit.chunk_id


def _normalised(hits: Sequence[Hit]) -> dict[Key, float]:
    """Min-max over one list: its best is 1, its last 0 (a list of equal scores: all 1)."""
    if not hits:
        return {}
    scores = [h.score for h in hits]
    lo, hi = min(scores), max(scores)
    if hi <= lo:
        return {_key(h): 1.0 for h in hits}
    return {_key(h): (h.score - lo) / (hi - lo) for h in hits}


def _pieces(part: str) -> list[str]:
    """The words inside one identifier: `BasicAuth` -> basic, auth; `_build_auth_header` ->
    build, auth, header."""
    return [p.lower() for p in _CAMEL_PARTS.findall(part)]


def _named(part: str, words: frozenset[str]) -> bool:
    low = part.lower()
    if low in words or low.strip("_") in words:
        return True
    pieces = _pieces(part)
    return len(pieces) > 1 and all(p in words for p in pieces)


def symbol_match(symbol: str | None, shape: QueryShape) -> int:
    r"""How many dotted parts of `symbol` the query names (0: it does not name this symbol).

    The symbol's own name (its last part) must be among the query's words, and at least one
    of its parts must be spelled as code. A part also counts when all the words inside it are
    in the query (`basic auth \`_build_auth_header\`` names `BasicAuth._build_auth_header`
    twice, `DigestAuth._build_auth_header` once), so the more specific definition wins."""
    if not symbol or not shape.names:
        return 0
    parts = [p for p in symbol.replace("::", ".").split(".") if p]
    if not parts or not _named(parts[-1], shape.words):
        return 0
    if not any(p.lower() in shape.names or p.lower().strip("_") in shape.names for p in parts):
        return 0
    return sum(1 for p in parts if _named(p, shape.words))


def path_match(path: str, shape: QueryShape) -> bool:
    low = path.lower()
    return any(low == p or low.endswith("/" + p) for p in shape.paths)


def fuse(
    vector_hits: Sequence[Hit],
    text_hits: Sequence[Hit],
    query: str,
    *,
    limit: int | None = None,
    shape: QueryShape | None = None,
) -> list[Hit]:
    """One ranking from the two best-first lists of one search (module docstring).

    Each hit comes back with its score explained: `score` (the fused score), `vector_rank`
    and `text_rank` (1-based places in the two lists, None when absent), `vector_score` and
    `text_score` (the raw scores), and `match` ("symbol", "path", "symbol+path" or None).
    Ties keep the vector list's order, then the keyword list's."""
    shape = shape or query_shape(query)
    w = shape.keyword_weight
    v_norm, t_norm = _normalised(vector_hits), _normalised(text_hits)
    first: dict[Key, Hit] = {}
    v_rank: dict[Key, int] = {}
    t_rank: dict[Key, int] = {}
    v_score: dict[Key, float] = {}
    t_score: dict[Key, float] = {}
    for rank, h in enumerate(vector_hits, start=1):
        first.setdefault(_key(h), h)
        v_rank.setdefault(_key(h), rank)
        v_score.setdefault(_key(h), h.score)
    for rank, h in enumerate(text_hits, start=1):
        first.setdefault(_key(h), h)
        t_rank.setdefault(_key(h), rank)
        t_score.setdefault(_key(h), h.score)
    fused: dict[Key, float] = {}
    match: dict[Key, str | None] = {}
    for cid, h in first.items():
        score = (1 - w) * v_norm.get(cid, 0.0) + w * t_norm.get(cid, 0.0)
        named = symbol_match(h.symbol, shape)
        in_path = bool(shape.paths) and path_match(h.path, shape)
        if named:
            score += shape.name_weight * (SYMBOL_BOOST + SYMBOL_PART_BOOST * (named - 1))
        if in_path:
            score += shape.name_weight * PATH_BOOST
        fused[cid] = score
        match[cid] = ("symbol+path" if in_path else "symbol") if named else ("path" if in_path else None)
    head = _heads(first, fused)
    # Stable: ties keep first-seen order (the vector list's, then the keyword list's).
    order = sorted(first, key=lambda cid: (-fused[cid], cid not in head))
    if limit is not None:
        order = order[:limit]
    return [
        dataclasses.replace(
            first[cid],
            score=round(fused[cid], 6),
            vector_score=v_score.get(cid),
            text_score=t_score.get(cid),
            vector_rank=v_rank.get(cid),
            text_rank=t_rank.get(cid),
            match=match[cid],
        )
        for cid in order
    ]


def _heads(hits: dict[Key, Hit], fused: dict[Key, float]) -> set[Key]:
    """A definition too long for one chunk is cut into windows that share its path and
    symbol; the first window holds its signature, so it is the one to show. Each group's first
    window takes the group's best score (in place) and is ranked just before the others."""
    groups: dict[tuple[str | None, str, str], list[Key]] = {}
    for cid, h in hits.items():
        if h.symbol:
            groups.setdefault((h.project, h.path, h.symbol), []).append(cid)
    heads = set()
    for ids in groups.values():
        first_window = min(ids, key=lambda cid: hits[cid].start_line)
        heads.add(first_window)
        fused[first_window] = max(fused[cid] for cid in ids)
    return heads


def rrf_fuse(rankings: Sequence[Sequence[Hit]], *, k: int = RRF_K, limit: int | None = None) -> list[Hit]:
    """Reciprocal rank fusion: score(d) = sum over rankings of 1 / (k + rank(d)), rank from 1.

    The rule `fuse` replaced, kept so benchmarks can show both side by side. A hit keeps the
    vector and text scores it had in each ranking. Ties keep first-seen order."""
    fused: dict[str, float] = {}
    first: dict[str, Hit] = {}
    vector_score: dict[str, float] = {}
    text_score: dict[str, float] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            fused[hit.chunk_id] = fused.get(hit.chunk_id, 0.0) + 1.0 / (k + rank)
            first.setdefault(hit.chunk_id, hit)
            if hit.vector_score is not None:
                vector_score.setdefault(hit.chunk_id, hit.vector_score)
            if hit.text_score is not None:
                text_score.setdefault(hit.chunk_id, hit.text_score)
    order = sorted(fused, key=lambda cid: -fused[cid])
    if limit is not None:
        order = order[:limit]
    return [
        dataclasses.replace(
            first[cid], score=fused[cid], vector_score=vector_score.get(cid), text_score=text_score.get(cid)
        )
        for cid in order
    ]
