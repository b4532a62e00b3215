"""Code-aware ranking: the fused candidates reordered by what a code search knows about files,
then, by default, one result per file.

What it owns: the stage between fusion (`fathom.index.fusion.fuse`) and the answer, on the
fused pool of one search, with nothing but the hits' paths, symbols and scores:

* **What a file is** (`file_role`): tests, examples and demos, vendored copies, generated
  code and data files (JSON, YAML, lock files…) rank below the code they accompany, unless
  the query asks for them ("tests for the retry", "example config"): each role's score is
  multiplied by its `DEMOTION`.
* **The file's name**: a file whose name the query spells, whole or by its words
  (`RetryPolicy` or "retry policy" for `retry_policy.py`, "router" for `router.go`), is
  lifted by `NAME_LIFT` times the square of the share of its name's words the query holds.
  A question that asks for an action ("convert a unicode url to ascii", "Returns the
  charset…": it opens on a verb of `_ACTIONS`) describes a function, which lives wherever it
  lives: there the lift is also scaled by the share of the question's words the name holds,
  so "url", one word of seven, lifts `url.py` by a seventh. A question about a subject ("how
  does the router match paths", "Response type and HTTP response construction") is answered
  by the file named after it, and keeps the whole lift. (Scaling every question cost semble's
  set 0.853 -> 0.823; scaling none cost the plain-words sets: docs/benchmarks.md.)
* **A definition's name in plain words**: "retry policy" names `RetryPolicy` as surely as
  the back-ticked identifier does; fusion boosts only the latter, so a definition whose own
  name's words the query holds, and that fusion did not boost, is lifted by `SYMBOL_LIFT`.
* **Several hits in one file lift the file**: each chunk of a file gains `SUPPORT` times the
  file's second-best score, so the file with three good chunks passes the file with one.
* **Ties are broken by path and line**, never by the order a store returned them in.

and `by_file`: one result per file, its best chunk first, the file's other chunks of the
pool kept on it (`FileHits.others`) as the ranges that also matched.

The stage is a function of the query and the pool alone: the pool is cut by the pipeline at
a fixed size, never by `k`, so the first k results of any answer are the first k of a
longer one (`fathom.index.search`).

Weights were chosen on the development part of semble's public benchmark
(`bench/semble_benchmark.py`, docs/benchmarks.md has the stage-by-stage figures); a stage
stays only where that set rewards it.

What it refuses to do: drop a hit (a demoted file still ranks, lower), demote what the query
asks for, or read any file.

API:
    file_role(path) -> str | None;  name_share(path, shape) -> float
    asks_action(shape) -> bool;  name_lift(path, shape) -> float
    rank(hits, shape) -> list[Hit]          every hit, reordered, scores adjusted
    by_file(hits, *, others=MAX_OTHERS) -> list[FileHits]
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Generic, Protocol, TypeVar

from fathom.index.fusion import QueryShape
from fathom.index.store import CAMEL_PARTS, Hit

# Score multipliers per file role (1: not demoted). A fused score lies in [0, 1] plus the
# name boosts, so a demoted file's chunk that the query names still passes unnamed code.
DEMOTION = {"test": 0.8, "example": 0.85, "vendored": 0.7, "generated": 0.7, "data": 0.75}
NAME_LIFT = 0.5  # a file whose whole name the query spells
SYMBOL_LIFT = 0.1  # a definition whose whole own name the query holds, as code or words
SUPPORT = 0.2  # times the file's second-best chunk score, added to each of its chunks
MAX_OTHERS = 5  # other ranges of a file kept on its result

# Query words that ask for a role: its files are then not demoted.
_ASKS = {
    "test": {
        "test",
        "tests",
        "testing",
        "spec",
        "specs",
        "unittest",
        "pytest",
        "fixture",
        "fixtures",
        "mock",
        "mocks",
        "assert",
        "asserts",
    },
    "example": {"example", "examples", "demo", "demos", "sample", "samples", "tutorial", "usage", "cookbook"},
    "vendored": {"vendor", "vendored", "third", "thirdparty", "bundled"},
    "generated": {"generated", "protobuf", "proto", "codegen", "minified"},
    "data": {
        "json",
        "yaml",
        "yml",
        "toml",
        "csv",
        "config",
        "configuration",
        "settings",
        "schema",
        "fixture",
        "data",
        "lock",
        "manifest",
        "package",
    },
}
_TEST_DIRS = {
    "test",
    "tests",
    "testing",
    "__tests__",
    "spec",
    "specs",
    "testdata",
    "test_data",
    "e2e",
    "integration_tests",
    "unittests",
}
_EXAMPLE_DIRS = {
    "example",
    "examples",
    "demo",
    "demos",
    "sample",
    "samples",
    "tutorial",
    "tutorials",
    "docs_src",
    "cookbook",
    "playground",
    "benchmarks",
    "bench",
}
_VENDORED_DIRS = {
    "vendor",
    "vendored",
    "third_party",
    "thirdparty",
    "third-party",
    "node_modules",
    "external",
    "extern",
    "deps",
    "_vendor",
}
_GENERATED = re.compile(
    r"(\.min\.(js|css)$|_pb2(_grpc)?\.pyi?$|\.pb\.go$|\.generated\.|"
    r"(^|/)generated/|(^|/)gen/|_generated\.)",
    re.IGNORECASE,
)
_TEST_NAME = re.compile(
    r"(^test_.*|.*_test\.[a-z]+$|.*\.(test|spec)\.[a-z]+$|.*Tests?\.[a-z]+$|"
    r"^tests?\.[a-z]+$|^conftest\.py$)"
)
_DATA_EXT = {
    ".json",
    ".yaml",
    ".yml",
    ".toml",
    ".csv",
    ".tsv",
    ".lock",
    ".xml",
    ".ini",
    ".cfg",
    ".txt",
    ".svg",
    ".snap",
}


def file_role(path: str) -> str | None:
    """What a file is beside the code it accompanies: "test", "example", "vendored",
    "generated", "data", or None for plain source."""
    p = PurePosixPath(path.replace("\\", "/"))
    dirs = {d.lower() for d in p.parts[:-1]}
    if dirs & _VENDORED_DIRS:
        return "vendored"
    if _GENERATED.search(p.as_posix()):
        return "generated"
    if dirs & _TEST_DIRS or _TEST_NAME.match(p.name):
        return "test"
    if dirs & _EXAMPLE_DIRS:
        return "example"
    if p.suffix.lower() in _DATA_EXT:
        return "data"
    return None


# File names that say nothing of what the file does.
_NAMELESS = {
    "index",
    "main",
    "mod",
    "lib",
    "__init__",
    "__main__",
    "init",
    "utils",
    "util",
    "helpers",
    "common",
    "types",
    "base",
    "core",
    "app",
}


def _words(text: str) -> list[str]:
    return [w.lower() for w in CAMEL_PARTS.findall(text)]


def _singular(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


# Verbs a question opens on when it asks for an action, not about a subject (also with a
# third-person "s": "Returns the ..."). Words that are as often nouns in code ("test",
# "store", "file", "request", "group", "filter", "map", "list") are left out: a question that
# opens on one is taken as naming a subject.
_ACTIONS = frozenset(
    """
    get set convert split generate format remove turn join put read create start return serve
    restart add find choose encode decode build delete mix pad escape iterate expand save load
    parse check compute calculate make send write open close wrap strip render raise validate
    merge copy sort count print show run call compare replace apply register resolve fetch
    download upload compress decompress redirect allow keep reject match extract look pick
    detect guess follow drop hash verify sign encrypt decrypt normalize normalise quote unquote
    truncate append insert update reset clear flush wait retry schedule cancel stop kill spawn
    connect disconnect bind listen accept receive emit dispatch transform serialize deserialize
    dump tell determine ensure lower upper capitalize indent dedent highlight measure estimate
""".split()
)


# Words that name nothing: a file `to_thread.py` is not named by "convert to a string".
_STOP = frozenset(
    "a an the to from of in on at by for with and or not no is are be as it its "
    "into onto out up down over under this that these those what which how when "
    "where why do does get set make use".split()
)


def asks_action(shape: QueryShape) -> bool:
    """Whether the question opens on a verb of `_ACTIONS` (or its third-person form)."""
    word = shape.opening
    return word in _ACTIONS or (word.endswith("s") and word[:-1] in _ACTIONS)


def _content_words(shape: QueryShape) -> frozenset[str]:
    """The query's words that can name something: singular, stop words left out."""
    return frozenset(_singular(w) for w in shape.words if w not in _STOP)


def _asked_words(shape: QueryShape) -> frozenset[str]:
    """The query's words, singular, also split at `_` and `-` (`retry_policy` -> retry,
    policy; `retrypolicy` stays whole and names `RetryPolicy` whole)."""
    split = {x for w in shape.words for x in re.split(r"[_\-]", w) if x}
    return frozenset(_singular(w) for w in shape.words | split if w not in _STOP)


def _share(parts: list[str], asked: frozenset[str]) -> float:
    if not parts:
        return 0.0
    if _singular("".join(parts)) in asked:  # `RetryPolicy` and `retrypolicy` name it whole
        return 1.0
    return sum(1 for p in parts if p in asked) / len(parts)


def _symbol_share(symbol: str | None, asked: frozenset[str]) -> float:
    """The share of a definition's own name's words that the query holds, spelled as code or
    not ("retry policy" names `RetryPolicy`); 0 for a name of one short word, which plain
    language holds by chance."""
    if not symbol:
        return 0.0
    name = symbol.replace("::", ".").split(".")[-1]
    parts = [_singular(w) for w in _words(name) if not w.isdigit()]
    if len(parts) == 1 and len(parts[0]) < 5:
        return 0.0
    return _share(parts, asked)


def _name_parts(path: str) -> list[str]:
    stem = PurePosixPath(path).stem
    if stem.lower() in _NAMELESS:
        return []
    return [_singular(w) for w in _words(stem) if not w.isdigit() and w not in _STOP]


def _name_share(path: str, asked: frozenset[str]) -> float:
    return _share(_name_parts(path), asked)


def _query_share(path: str, content: frozenset[str]) -> float:
    """The share of the question's words that the file's name holds: a word is held when it
    is one of the name's words or the whole name (`retrypolicy`), or when each of its `_`
    and `-` parts is one of them (`retry_policy`)."""
    parts = _name_parts(path)
    if not parts or not content:
        return 0.0
    whole, held = "".join(parts), set(parts)
    return sum(1 for w in content if w == whole or all(x in held for x in re.split(r"[_\-]", w) if x)) / len(
        content
    )


def _name_lift(path: str, asked: frozenset[str], content: frozenset[str] | None) -> float:
    """`content`: the question's words when it asks for an action (the lift is scaled by the
    share of them the name holds), None when it names a subject."""
    share = _name_share(path, asked)
    if not share:
        return 0.0
    return NAME_LIFT * share**2 * (1.0 if content is None else _query_share(path, content))


def name_share(path: str, shape: QueryShape) -> float:
    """The share of a file name's words that the query holds (0 to 1): `retry_policy.py` is
    named whole by "RetryPolicy", "retry policy" or "retry_policy"; `index.js`, `mod.rs`,
    `__init__.py` and such carry no name."""
    return _name_share(path, _asked_words(shape))


def name_lift(path: str, shape: QueryShape) -> float:
    """What a file's name adds to its chunks' scores for this question (module docstring)."""
    return _name_lift(path, _asked_words(shape), _content_words(shape) if asks_action(shape) else None)


def _asked_roles(shape: QueryShape) -> set[str]:
    words = {_singular(w) for w in shape.words} | set(shape.words)
    return {role for role, asks in _ASKS.items() if words & asks}


def _order_key(h: Hit) -> tuple[float, str, str, int, str]:
    return (-h.score, h.project or "", h.path, h.start_line, h.chunk_id)


def rank(hits: Sequence[Hit], shape: QueryShape, *, project: str | None = None) -> list[Hit]:
    """Every hit of the fused pool, its score adjusted by the file it is in, best first,
    ties broken by project, path and line (module docstring). Each path and each symbol is
    read once. `project`: the one project every hit comes from, set on each (None: each hit
    names its own)."""
    roles, asked = _asked_roles(shape), _asked_words(shape)
    content = _content_words(shape) if asks_action(shape) else None
    by_path: dict[str, tuple[float, float]] = {}  # path -> (role factor, name lift)
    by_symbol: dict[str | None, float] = {}
    scores: list[float] = []
    for h in hits:
        factor, lift = by_path.get(h.path) or by_path.setdefault(
            h.path,
            (
                DEMOTION.get(role or "", 1.0) if (role := file_role(h.path)) not in roles else 1.0,
                _name_lift(h.path, asked, content),
            ),
        )
        score = h.score * factor + lift
        if SYMBOL_LIFT and h.match is None:  # a name fusion already boosted counts once
            named = by_symbol.get(h.symbol)
            if named is None:
                named = by_symbol[h.symbol] = SYMBOL_LIFT * _symbol_share(h.symbol, asked) ** 2
            score += named
        scores.append(score)
    if SUPPORT:
        files: dict[tuple[str | None, str], list[float]] = {}
        for h, score in zip(hits, scores, strict=True):
            files.setdefault((h.project, h.path), []).append(score)
        second = {f: sorted(s, reverse=True)[1] for f, s in files.items() if len(s) > 1}
        scores = [
            score + SUPPORT * max(0.0, second.get((h.project, h.path), 0.0))
            for h, score in zip(hits, scores, strict=True)
        ]
    scored = [
        dataclasses.replace(
            h,
            score=round(score, 6) if math.isfinite(score) else score,
            project=project if project is not None else h.project,
        )
        for h, score in zip(hits, scores, strict=True)
    ]
    return sorted(scored, key=_order_key)


class _Located(Protocol):
    @property
    def project(self) -> str | None: ...

    @property
    def path(self) -> str: ...


_H = TypeVar("_H", bound=_Located)


@dataclass(frozen=True)
class FileHits(Generic[_H]):
    """One file of a ranking: its best hit, and the file's other hits of the same ranking,
    best first (at most `MAX_OTHERS`)."""

    best: _H
    others: tuple[_H, ...] = ()


def by_file(hits: Sequence[_H], *, others: int = MAX_OTHERS) -> list[FileHits[_H]]:
    """One entry per (project, file), in the order of each file's best hit."""
    groups: dict[tuple[str | None, str], list[_H]] = {}
    for h in hits:
        groups.setdefault((h.project, h.path), []).append(h)
    return [FileHits(g[0], tuple(g[1 : 1 + others])) for g in groups.values()]
