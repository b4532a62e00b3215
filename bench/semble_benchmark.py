"""Fathom on semble's public labelled code-search benchmark, scored the way semble scores
itself (NDCG@10), with semble's published figures for the same repositories beside it.

    nice -n 10 .venv/bin/python bench/semble_benchmark.py --mirror-root MIRRORS \\
        --repos-dir /tmp/semble_dev/repos --data-dir /tmp/semble_dev/data \\
        --json /tmp/semble_dev/baseline.json                       # the 22 dev repos, ~40 min shared
    ... --repos bats-core,redux,zig-clap                           # ~1 min the first time
    ... --repos all                                                # every labelled repo but the held-out

**The data.** MinishLab/semble's `benchmarks/` at commit `2018720b88ab` (SEMBLE_COMMIT; the
fork `michalfedyna/semble` holds the same commit): `annotations/<repo>.json` (the labels),
`repos.json` (each repository's URL, pinned revision, language and `benchmark_root`, the
folder semble indexes) and `results/*.json` (the published runs). The script reads them
straight from a git repository of semble at that commit: `--semble GIT_DIR`, else
`<mirror-root>/MinishLab+semble` or `<mirror-root>/michalfedyna+semble` (a bare mirror, or
one with the git dir under `repo/`), else a bare
clone of https://github.com/MinishLab/semble.git under `<repos-dir>/.semble.git`. Each
benchmark repository is checked out at its pinned revision into `<repos-dir>/<name>` (a
`--shared` clone of `<mirror-root>/<owner>+<name>` when that mirror holds the revision, else
a depth-1 fetch of the revision from its URL; sparse to `benchmark_root` and the files of
its parent folders), and its `benchmark_root` is indexed once with Fathom into `--data-dir`
as project `<name>` (code table only unless `--all-tables`: `search_code` reads nothing
else). `<data-dir>/semble-bench/<name>.json` records the revision, folder and encoder of that
index; a later run with the same three reuses it (`--reindex` rebuilds it in full), so a
run that was stopped resumes by being started again (`--resume` also keeps the repos that
`--json OUT` already holds, instead of asking their queries again).

**The labels.** A JSON list per repository; each item has `query`, `relevant` and
`secondary` (lists of targets) and `category` (`symbol`, `semantic` or `architecture`; where
absent semble infers it: no space -> symbol, starting with "how " -> architecture, else
semantic). A target is a path relative to the repository root, or `{path, start_line,
end_line}` for a line span. A few items carry `seed` and `related`, which scoring ignores.

**The score** (semble's `benchmarks/metrics.py`, `benchmarks/data.py` and
`benchmarks/run_benchmark.py` at that commit are the reference; nothing of them is copied):
every target, `relevant` and `secondary` alike, is worth a gain of 1 (no grading). Fathom
is asked for the top k=10 hits (`fathom.index.search.pipeline`, the code table, as
`search_code` asks it, without a reranker, which Fathom's default set-up lacks); the list is
not deduplicated. A target's rank is the place of the first hit whose path equals the target
path or ends with "/" + it (backslashes read as slashes; the hit's path is made relative to
the repository root, as semble's absolute chunk paths are) and, for a target with a line
span, whose lines overlap the span. Each rank within k sets that slot's gain to 1 (set, not
added: a slot earns at most 1, and a second hit in an already-found file earns nothing);
DCG = sum of gain / log2(place + 1); IDCG is the DCG of min(k, targets) gains of 1 in the
first places; NDCG@10 = DCG / IDCG. A repo's figure is the mean over its queries; the overall
figure, as semble's `summary.ndcg10`, is the mean over repos (and per category, the mean over
repos of each repo's category mean). Also printed: the query-weighted mean, and the mean when
the hit paths are deduplicated before ranking, as semble's ColGREP baseline
(`benchmarks/baselines/colgrep.py`) scores its file list (`ndcg_files` in the JSON).

**Published figures**, per repo, from `results/` at that commit: semble
(`semble-hybrid-0332378809c5.json`), CodeRankEmbed hybrid and CodeRankEmbed alone
(`coderankembed-0332378809c5.json`, modes `hybrid` and `semantic`), BM25 alone
(`semble-ablations-1ea77add4c1b.json`, mode `bm25`), ColGREP (`colgrep-c8a40fab2235.json`)
and ripgrep (`ripgrep-fixed-strings-0332378809c5.json`); each mean is taken over the repos
this run measured.

**Held out.** HELD_OUT names 14 repositories kept for an outside check: they are never
checked out, indexed or asked unless `--include-held-out` is given, and naming one without it
is refused before anything starts (`fmt` is semble's `fmtlib`). DEV_REPOS are the 22 small
repos run by default (14 languages: Go's three repos are all held out, and the Rust, Java,
Scala and C++ ones left are large or their pinned revision is missing from the mirrors).

`--group file|chunk` is handed to the pipeline when it takes a `group` argument (and noted
as ignored when it does not). Latency is the pipeline's wall time per query (the median of
`--runs` runs, after one warm-up search per repo), p50 over the queries. `--json OUT` writes
every query's ranked hits, target ranks and scores, so two runs can be compared query by query.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT / "src", ROOT):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench._common import machine, percentile, table  # noqa: E402
from bench.search_quality import code_only  # noqa: E402

from fathom.config import Settings  # noqa: E402
from fathom.index import search as search_mod  # noqa: E402
from fathom.service import Fathom  # noqa: E402

SEMBLE_URL = "https://github.com/MinishLab/semble.git"
SEMBLE_COMMIT = "2018720b88ab8db86a24be651e31d96a4fe7776c"
SEMBLE_MIRRORS = ("MinishLab+semble", "michalfedyna+semble")
K = 10

# Kept for an outside check: never fetched, indexed, run or tuned on without --include-held-out.
HELD_OUT = frozenset(
    {
        "express",
        "sinatra",
        "chi",
        "model2vec",
        "trpc",
        "axum",
        "rack",
        "cobra",
        "fastapi",
        "gin",
        "fmtlib",
        "aiohttp",
        "serde",
        "gson",
    }
)
ALIASES = {"fmt": "fmtlib"}  # the name the repository goes by, against semble's label file

# Small repos (at most ~1.5 MB of source under benchmark_root at the pinned revision), 14
# languages, whose pinned revision the local mirrors held (snapkit, axios, circe, guzzle,
# starlette, httpx, nlohmann-json and http4s were left out: their mirrors predate it).
# Smallest first, so that a run stopped early has the most repos done.
DEV_REPOS = (
    "bats-core",
    "redux",
    "zig-clap",
    "xmonad",
    "requests",
    "flask",
    "lazy.nvim",
    "click",
    "plug",
    "monolog",
    "ktor",
    "aeson",
    "dapper",
    "telescope.nvim",
    "rails",
    "phoenix",
    "alamofire",
    "vapor",
    "exposed",
    "vitest",
    "nvm",
    "libuv",
)

# label -> (file under benchmarks/results/, mode or None), in the table's order.
PUBLISHED = {
    "semble": ("semble-hybrid-0332378809c5.json", None),
    "CRE hybrid": ("coderankembed-0332378809c5.json", "hybrid"),
    "CRE": ("coderankembed-0332378809c5.json", "semantic"),
    "BM25": ("semble-ablations-1ea77add4c1b.json", "bm25"),
    "ColGREP": ("colgrep-c8a40fab2235.json", None),
    "ripgrep": ("ripgrep-fixed-strings-0332378809c5.json", None),
}
CATEGORIES = ("symbol", "semantic", "architecture")


# --------------------------------------------------------------------------- semble's data


def git(*args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=check)


def git_dir_in(folder: Path) -> Path | None:
    """The git dir of a mirror folder: the folder itself (bare), its `repo/` or its `.git`."""
    for candidate in (folder / "repo", folder, folder / ".git"):
        if (
            candidate.is_dir()
            and git("--git-dir", str(candidate), "rev-parse", "--git-dir", check=False).returncode == 0
        ):
            return candidate
    return None


def has_commit(git_dir: Path, rev: str) -> bool:
    return git("--git-dir", str(git_dir), "cat-file", "-e", f"{rev}^{{commit}}", check=False).returncode == 0


class SembleData:
    """semble's `benchmarks/` files at SEMBLE_COMMIT, read from a git repository."""

    def __init__(self, git_dir: Path):
        self.git_dir = git_dir
        self.repos = {r["name"]: r for r in self.read("repos.json")}
        self._published: dict[str, dict[str, dict[str, Any]]] = {}

    @classmethod
    def locate(cls, explicit: Path | None, mirror_root: Path | None, repos_dir: Path) -> SembleData:
        candidates = [explicit] if explicit else []
        if mirror_root and not explicit:
            candidates += [mirror_root / m for m in SEMBLE_MIRRORS]
        for folder in candidates:
            gd = git_dir_in(folder)
            if gd is not None and has_commit(gd, SEMBLE_COMMIT):
                return cls(gd)
        if explicit:
            raise SystemExit(f"{explicit} is no git repository holding semble's {SEMBLE_COMMIT[:12]}")
        clone = repos_dir / ".semble.git"
        if not clone.exists():
            print(f"cloning {SEMBLE_URL} into {clone}", flush=True)
            git("clone", "--bare", "--quiet", SEMBLE_URL, str(clone))
        if not has_commit(clone, SEMBLE_COMMIT):
            raise SystemExit(f"{clone} lacks semble's {SEMBLE_COMMIT[:12]}")
        return cls(clone)

    def read(self, path: str) -> Any:
        out = git("--git-dir", str(self.git_dir), "show", f"{SEMBLE_COMMIT}:benchmarks/{path}")
        return json.loads(out.stdout)

    def tasks(self, repo: str) -> list[Task]:
        return [
            task_of(item) for item in self.read(f"annotations/{repo}.json") if item.get("repo", repo) == repo
        ]

    def published(self, label: str) -> dict[str, dict[str, Any]]:
        """repo -> its published entry (`ndcg10`, and `by_category` where the file has it)."""
        if label not in self._published:
            name, mode = PUBLISHED[label]
            try:
                entries = self.read(f"results/{name}")["repos"]
            except (subprocess.CalledProcessError, KeyError, json.JSONDecodeError):
                entries = []
            self._published[label] = {e["repo"]: e for e in entries if mode is None or e.get("mode") == mode}
        return self._published[label]


# --------------------------------------------------------------------------- labels and score


@dataclass(frozen=True)
class Target:
    path: str
    start_line: int | None = None
    end_line: int | None = None

    def as_label(self) -> str:
        return self.path if self.start_line is None else f"{self.path}:{self.start_line}-{self.end_line}"


@dataclass(frozen=True)
class Task:
    query: str
    category: str
    targets: tuple[Target, ...]  # relevant, then secondary: every one a gain of 1


def category_of(query: str) -> str:
    """semble's fallback for a label without a category."""
    text = query.strip()
    if " " not in text:
        return "symbol"
    return "architecture" if text.lower().startswith("how ") else "semantic"


def target_of(raw: Any) -> Target:
    if isinstance(raw, str):
        return Target(raw)
    start, end = raw.get("start_line"), raw.get("end_line")
    return Target(str(raw["path"]), None if start is None else int(start), None if end is None else int(end))


def task_of(item: dict[str, Any]) -> Task:
    category = item.get("category")
    targets = [target_of(t) for t in [*item.get("relevant", []), *item.get("secondary", [])]]
    return Task(
        item["query"], category if isinstance(category, str) else category_of(item["query"]), tuple(targets)
    )


def same_file(hit_path: str, target_path: str) -> bool:
    hit, target = hit_path.replace("\\", "/"), target_path.replace("\\", "/")
    return hit == target or hit.endswith("/" + target)


def covers(hit: tuple[str, int, int], target: Target) -> bool:
    path, start, end = hit
    if not same_file(path, target.path):
        return False
    if target.start_line is None or target.end_line is None:
        return True
    return not (end < target.start_line or start > target.end_line)


def ranks_of(hits: list[tuple[str, int, int]], targets: tuple[Target, ...]) -> list[int | None]:
    """Each target's 1-based place: the first hit covering it, or None."""
    return [next((i for i, h in enumerate(hits, 1) if covers(h, t)), None) for t in targets]


def ndcg(ranks: list[int | None], n_targets: int, k: int = K) -> float:
    if n_targets == 0:
        return 0.0
    gains = [0] * k
    for r in ranks:
        if r is not None and 1 <= r <= k:
            gains[r - 1] = 1  # set, not added: one slot earns at most one gain
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    ideal = sum(1 / math.log2(i + 2) for i in range(min(k, n_targets)))
    return dcg / ideal


def file_ranks_of(hits: list[tuple[str, int, int]], targets: tuple[Target, ...]) -> list[int | None]:
    """ColGREP's rule: hit paths deduplicated (first place kept), targets matched by path."""
    files = list(dict.fromkeys(h[0] for h in hits))
    return [next((i for i, f in enumerate(files, 1) if same_file(f, t.path)), None) for t in targets]


# --------------------------------------------------------------------------- checkout and index


def mirror_of(spec: dict[str, Any], mirror_root: Path | None) -> Path | None:
    if mirror_root is None:
        return None
    owner, name = spec["url"].removesuffix(".git").rstrip("/").split("/")[-2:]
    gd = git_dir_in(mirror_root / f"{owner}+{name}")
    return gd if gd is not None and has_commit(gd, spec["revision"]) else None


def checkout(spec: dict[str, Any], repos_dir: Path, mirror_root: Path | None) -> Path:
    """`<repos-dir>/<name>` at the pinned revision (made once, then reused)."""
    dest, rev = repos_dir / spec["name"], spec["revision"]
    if (dest / ".git").exists():
        if git("-C", str(dest), "rev-parse", "HEAD", check=False).stdout.strip() == rev:
            return dest
        if git("-C", str(dest), "checkout", "--quiet", "--detach", rev, check=False).returncode == 0:
            return dest
        raise SystemExit(f"{dest} is a checkout without {rev[:12]}: remove it and run again")
    if dest.exists():
        raise SystemExit(f"{dest} exists and is no git checkout: remove it and run again")
    dest.parent.mkdir(parents=True, exist_ok=True)
    mirror = mirror_of(spec, mirror_root)
    if mirror is not None:
        git("clone", "--quiet", "--shared", "--no-checkout", str(mirror), str(dest))
        target = rev
    else:
        print(
            f"  {spec['name']}: no local mirror holds {rev[:12]}; fetching it from {spec['url']}", flush=True
        )
        git("init", "--quiet", str(dest))
        git("-C", str(dest), "fetch", "--quiet", "--depth", "1", spec["url"], rev)
        target = "FETCH_HEAD"
    if spec.get("benchmark_root"):  # cone mode: the folder, plus the files of its parents
        git("-C", str(dest), "sparse-checkout", "set", spec["benchmark_root"])
    git("-C", str(dest), "checkout", "--quiet", "--detach", target)
    return dest


@dataclass
class Indexed:
    chunks: int
    seconds: float
    rate: float
    reused: bool


def meta_path(data_dir: Path, name: str) -> Path:
    return data_dir / "semble-bench" / f"{name}.json"


async def index_repo(
    fathom: Fathom, name: str, rev: str, folder: Path, data_dir: Path, *, reindex: bool, tables: str
) -> Indexed:
    """Index `folder` as project `name`, unless an index of the same revision, folder, encoder
    and tables is there already."""
    wanted = {"commit": rev, "folder": str(folder.resolve()), "encoder": fathom.encoder.id, "tables": tables}
    meta = meta_path(data_dir, name)
    old = json.loads(meta.read_text()) if meta.exists() else None
    exists = fathom.store.has_project(name)
    if not reindex and exists and old is not None and all(old.get(k) == v for k, v in wanted.items()):
        return Indexed(old["chunks"], old["seconds"], old["rate"], reused=True)
    # No record beside an existing project: a run stopped inside this index, which Fathom
    # resumes; a record of another revision or folder, or --reindex: a full rebuild.
    full = reindex or old is not None or not exists
    t0 = time.perf_counter()
    report = await fathom.index(folder, name, full=full)
    seconds = time.perf_counter() - t0
    chunks = int(report.tables.get("code", report.chunks))
    meta.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # the data dir's own modes
    meta.touch(mode=0o600)
    meta.write_text(
        json.dumps(
            wanted | {"chunks": chunks, "seconds": round(seconds, 1), "rate": round(report.rate, 1)}, indent=1
        )
    )
    return Indexed(chunks, seconds, report.rate, reused=False)


# --------------------------------------------------------------------------- search


def search_call(group: str | None) -> tuple[dict[str, Any], bool]:
    """The extra keyword arguments for the pipeline, and whether `--group` reached it."""
    if group is None:
        return {}, False
    params = inspect.signature(search_mod.pipeline).parameters
    if "group" in params or "request" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return {"group": group}, True
    return {}, False


async def ask(
    fathom: Fathom, project: str, query: str, k: int, extra: dict[str, Any]
) -> tuple[list[Any], float]:
    t0 = time.perf_counter()
    if "request" in inspect.signature(search_mod.pipeline).parameters:  # one request model
        from fathom.index.request import SearchRequest

        ranking = await search_mod.pipeline(fathom, SearchRequest(query, project, "code", k, **extra))
    else:  # an older checkout: the arguments one by one
        ranking = await search_mod.pipeline(fathom, query, project, "code", k=k, **extra)
    return list(ranking.hits), (time.perf_counter() - t0) * 1000


@dataclass
class RepoResult:
    name: str
    language: str
    commit: str
    queries: int
    chunks: int
    index_s: float
    reused: bool
    ndcg10: float
    ndcg_files: float
    p50_ms: float
    by_category: dict[str, float] = field(default_factory=dict)
    asked: list[dict[str, Any]] = field(default_factory=list)


async def run_repo(
    fathom: Fathom, data: SembleData, name: str, args: argparse.Namespace, extra: dict[str, Any]
) -> RepoResult:
    spec = data.repos[name]
    tasks = data.tasks(name)
    checked = await asyncio.to_thread(checkout, spec, args.repos_dir, args.mirror_root)
    root = spec.get("benchmark_root") or ""
    folder = checked / root if root else checked
    print(f"{name}: {len(tasks)} queries, indexing {folder}", flush=True)
    done = await index_repo(
        fathom,
        name,
        spec["revision"],
        folder,
        args.data_dir,
        reindex=args.reindex,
        tables="all" if args.all_tables else "code",
    )
    print(
        f"  {done.chunks} code chunks, "
        + ("index reused" if done.reused else f"indexed in {done.seconds:.0f} s ({done.rate:.1f} chunks/s)"),
        flush=True,
    )
    await ask(fathom, name, tasks[0].query, args.k, extra)  # warm-up: the table opened, the model loaded
    prefix = f"{name}/{root.strip('/')}/" if root else f"{name}/"
    asked: list[dict[str, Any]] = []
    for task in tasks:
        times = []
        for _ in range(max(1, args.runs)):
            hits, ms = await ask(fathom, name, task.query, args.k, extra)
            times.append(ms)
        ranked = [(prefix + h.path, int(h.start_line), int(h.end_line)) for h in hits[: args.k]]
        ranks = ranks_of(ranked, task.targets)
        franks = file_ranks_of(ranked, task.targets)
        asked.append(
            {
                "repo": name,
                "query": task.query,
                "category": task.category,
                "targets": [t.as_label() for t in task.targets],
                "ranked": [
                    {
                        "path": p.removeprefix(f"{name}/"),
                        "start_line": s,
                        "end_line": e,
                        "score": round(float(h.score), 6),
                    }
                    for (p, s, e), h in zip(ranked, hits)
                ],
                "ranks": ranks,
                "ndcg": round(ndcg(ranks, len(task.targets), args.k), 6),
                "file_ranks": franks,
                "ndcg_files": round(ndcg(franks, len(task.targets), args.k), 6),
                "ms": round(statistics.median(times), 2),
            }
        )
        if args.verbose:
            q = asked[-1]
            print(f"  [{task.category:<12}] ndcg={q['ndcg']:.3f} ranks={ranks} q={task.query!r}", flush=True)
    by_cat: dict[str, list[float]] = {}
    for q in asked:
        by_cat.setdefault(q["category"], []).append(q["ndcg"])
    result = RepoResult(
        name,
        spec["language"],
        spec["revision"],
        len(asked),
        done.chunks,
        round(done.seconds, 1),
        done.reused,
        statistics.fmean(q["ndcg"] for q in asked),
        statistics.fmean(q["ndcg_files"] for q in asked),
        percentile([q["ms"] for q in asked], 50),
        {c: statistics.fmean(v) for c, v in sorted(by_cat.items())},
        asked,
    )
    print(
        f"  NDCG@{args.k} {result.ndcg10:.3f} (semble {data.published('semble').get(name, {}).get('ndcg10', float('nan')):.3f}), "
        f"p50 {result.p50_ms:.0f} ms",
        flush=True,
    )
    return result


# --------------------------------------------------------------------------- report


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def report(data: SembleData, results: list[RepoResult], k: int) -> str:
    labels = list(PUBLISHED)
    pub = {label: data.published(label) for label in labels}
    head = ["repo", "language", "queries", "chunks", f"Fathom NDCG@{k}", *labels, "p50 ms"]
    rows: list[list[Any]] = []
    for r in results:
        rows.append(
            [
                r.name,
                r.language,
                r.queries,
                r.chunks,
                r.ndcg10,
                *[pub[label].get(r.name, {}).get("ndcg10", float("nan")) for label in labels],
                r.p50_ms,
            ]
        )
    rows.append(
        [
            f"mean over {len(results)} repos",
            "",
            sum(r.queries for r in results),
            sum(r.chunks for r in results),
            mean([r.ndcg10 for r in results]),
            *[
                mean([pub[label][r.name]["ndcg10"] for r in results if r.name in pub[label]])
                for label in labels
            ],
            percentile([q["ms"] for r in results for q in r.asked], 50),
        ]
    )
    out = [table(head, rows)]
    cat_labels = [label for label in labels if any("by_category" in e for e in pub[label].values())]
    cats = [c for c in CATEGORIES if any(c in r.by_category for r in results)]
    cats += sorted({c for r in results for c in r.by_category} - set(cats))
    cat_rows = []
    for c in cats:
        have = [r for r in results if c in r.by_category]
        cat_rows.append(
            [
                c,
                sum(1 for r in results for q in r.asked if q["category"] == c),
                mean([r.by_category[c] for r in have]),
                *[
                    mean(
                        [
                            pub[label][r.name]["by_category"][c]
                            for r in have
                            if c in pub[label].get(r.name, {}).get("by_category", {})
                        ]
                    )
                    for label in cat_labels
                ],
            ]
        )
    out.append("\nper category: the mean over repos of each repo's category mean (semble's way)")
    out.append(table(["category", "queries", f"Fathom NDCG@{k}", *cat_labels], cat_rows))
    every = [q for r in results for q in r.asked]
    out.append(
        f"\nFathom, query-weighted mean over {len(every)} queries: "
        f"{mean([q['ndcg'] for q in every]):.3f}; hit paths deduplicated before ranking "
        f"(ColGREP's rule), mean over repos: {mean([r.ndcg_files for r in results]):.3f}"
    )
    return "\n".join(out)


def fathom_version() -> tuple[str, list[str]]:
    """The checkout's commit and its uncommitted changes under src/ (what the run measured)."""
    head = git("-C", str(ROOT), "rev-parse", "HEAD", check=False).stdout.strip()
    dirty = git("-C", str(ROOT), "status", "--porcelain", "--", "src", check=False).stdout.splitlines()
    return head, [line.strip() for line in dirty]


def payload(
    args: argparse.Namespace, fathom: Fathom, results: list[RepoResult], grouped: bool
) -> dict[str, Any]:
    head, dirty = fathom_version()
    return {
        "semble_commit": SEMBLE_COMMIT,
        "fathom_commit": head,
        "fathom_src_changes": dirty,
        "encoder": fathom.encoder.id,
        "k": args.k,
        "group": args.group,
        "group_applied": grouped,
        "tables": "all" if args.all_tables else "code",
        "machine": machine(),
        "summary": {
            "repos": len(results),
            "ndcg10": mean([r.ndcg10 for r in results]),
            "ndcg_files": mean([r.ndcg_files for r in results]),
            "by_category": {
                c: mean([r.by_category[c] for r in results if c in r.by_category])
                for c in sorted({c for r in results for c in r.by_category})
            },
        },
        "repos": [{k: v for k, v in asdict(r).items() if k != "asked"} for r in results],
        "queries": [q for r in results for q in r.asked],
    }


def load_previous(path: Path | None, args: argparse.Namespace, encoder: str) -> dict[str, RepoResult]:
    """`--resume`: the repos an earlier run with the same k, group and encoder wrote to OUT."""
    if path is None or not path.exists():
        return {}
    old = json.loads(path.read_text())
    if (old.get("k"), old.get("group"), old.get("encoder")) != (args.k, args.group, encoder):
        return {}
    done: dict[str, RepoResult] = {}
    for entry in old.get("repos", []):
        asked = [q for q in old.get("queries", []) if q["repo"] == entry["name"]]
        done[entry["name"]] = RepoResult(**entry, asked=asked)
    return done


# --------------------------------------------------------------------------- main


def chosen_repos(spec: str | None, data: SembleData, include_held_out: bool) -> list[str]:
    if spec is None:
        names = list(DEV_REPOS)
    elif spec.strip() == "all":
        names = [n for n in data.repos if include_held_out or n not in HELD_OUT]
    else:
        names = [ALIASES.get(n.strip(), n.strip()) for n in spec.split(",") if n.strip()]
    held = [n for n in names if n in HELD_OUT]
    if held and not include_held_out:
        raise SystemExit(
            f"refusing held-out repositories {', '.join(held)}: they are kept for an "
            f"outside check (pass --include-held-out only for that check)"
        )
    unknown = [n for n in names if n not in data.repos]
    if unknown:
        raise SystemExit(f"no such repository in semble's repos.json: {', '.join(unknown)}")
    return list(dict.fromkeys(names))


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repos-dir", type=Path, required=True, help="where the checkouts go")
    ap.add_argument("--data-dir", type=Path, required=True, help="Fathom's data dir for the indexes")
    ap.add_argument("--repos", help="comma-separated names, or 'all' (default: the 22 dev repos)")
    ap.add_argument("--k", type=int, default=K, help="hits asked and the NDCG cut-off (semble: 10)")
    ap.add_argument(
        "--group",
        choices=("file", "chunk"),
        help="passed to the pipeline as group= when it takes that argument",
    )
    ap.add_argument("--json", type=Path, help="write every query's ranked hits and scores here")
    ap.add_argument("--mirror-root", type=Path, help="folder of local mirrors named <owner>+<name>")
    ap.add_argument("--semble", type=Path, help="a git repository of semble holding SEMBLE_COMMIT")
    ap.add_argument("--reindex", action="store_true", help="rebuild every index in full")
    ap.add_argument("--resume", action="store_true", help="keep the repos --json already holds")
    ap.add_argument("--all-tables", action="store_true", help="index docs too, as `fathom index` does")
    ap.add_argument("--runs", type=int, default=1, help="timed runs per query (semble: 5)")
    ap.add_argument(
        "--include-held-out",
        action="store_true",
        help="allow the held-out repositories (the outside check only)",
    )
    ap.add_argument("--verbose", action="store_true", help="print each query's score and ranks")
    args = ap.parse_args()
    args.repos_dir, args.data_dir = args.repos_dir.resolve(), args.data_dir.resolve()

    data = SembleData.locate(args.semble, args.mirror_root, args.repos_dir)
    names = chosen_repos(args.repos, data, args.include_held_out)  # refused before anything starts
    print(machine())
    head, dirty = fathom_version()
    print(
        f"Fathom {head[:12] or '(no git)'} from {ROOT}"
        + (f", with {len(dirty)} uncommitted change(s) under src/" if dirty else "")
    )
    print(f"semble labels {SEMBLE_COMMIT[:12]} from {data.git_dir}; {len(names)} repos: {', '.join(names)}")
    fathom = Fathom(Settings(data_dir=args.data_dir))
    if not args.all_tables:
        code_only(fathom)
    extra, grouped = search_call(args.group)
    if args.group and not grouped:
        print(f"note: the pipeline takes no group argument; --group {args.group} is ignored")
    print(
        f"encoder {fathom.encoder.id}, k={args.k}, group={args.group if grouped else '(default)'}", flush=True
    )
    previous = load_previous(args.json, args, fathom.encoder.id) if args.resume else {}
    results: list[RepoResult] = []
    started = time.perf_counter()
    try:
        for name in names:
            spec = data.repos[name]
            if name in previous and previous[name].commit == spec["revision"]:
                results.append(previous[name])
                print(f"{name}: kept from {args.json}", flush=True)
                continue
            results.append(await run_repo(fathom, data, name, args, extra))
            if args.json:  # after every repo: a stopped run loses at most the one under way
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(payload(args, fathom, results, grouped), indent=1))
    finally:
        await fathom.aclose()
    if results:
        print()
        print(report(data, results, args.k))
        print(
            f"\nwall time {time.perf_counter() - started:.0f} s"
            + (f"; every query in {args.json}" if args.json else "")
        )


if __name__ == "__main__":
    asyncio.run(main())
