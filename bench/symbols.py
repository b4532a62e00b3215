"""Symbol navigation on httpx: the time to build its symbol table from the index, to bring it
up to date (nothing changed; one file changed), and each symbol query's latency, at the service
and through an MCP session (the page held to `max_tokens`, counted with the tokenizer).

The index is embedded by a hash encoder standing in for the model: symbols never read a
vector, so the model would only slow the set-up. Run: `.venv/bin/python bench/symbols.py`
(about a minute on 2 shared cores; `--runs 10` for a short one).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import _common  # noqa: F401 - puts src/ on the path, sets the offline flags
import httpx
import numpy as np
from _common import hash_vectors, machine, percentile, table

from fathom.config import Settings
from fathom.inference.provider import Kind, Provider, ProviderInfo
from fathom.roles import EMBEDDING_ROLES
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom, symbols


class HashEncoder(Provider):
    def __init__(self, width: int = 64):
        self.info = ProviderInfo(
            id="hash:bench",
            kind=Kind.LOCAL,
            roles=frozenset(EMBEDDING_ROLES),
            model="bench/hash",
            width=width,
        )

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return hash_vectors(list(texts), self.info.width or 64)


def timed(fn: Callable[[], Any], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def row(what: str, ms: list[float]) -> list[Any]:
    return [what, len(ms), f"{statistics.median(ms):.1f}", f"{percentile(ms, 95):.1f}"]


async def over_mcp(fathom: Fathom, runs: int) -> list[list[Any]]:
    from mcp import Client

    rows = []
    async with Client(build_mcp_server(fathom)) as client:
        for tool, args in (
            ("find_symbol", {"name": "AsyncClient.send"}),
            ("find_references", {"name": "_merge_cookies"}),
            ("find_references", {"name": "self"}),
            ("outline", {"path": "_client.py"}),
        ):
            ms = []
            for _ in range(runs):
                start = time.perf_counter()
                result = await client.call_tool(tool, args)
                ms.append((time.perf_counter() - start) * 1000)
            assert not result.is_error, result.content[0].text
            shown = len(result.structured_content["results"])
            rows.append(
                row(
                    f"MCP {tool}({next(iter(args.values()))!r}): {shown} shown of "
                    f"{result.structured_content['found']}",
                    ms,
                )
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    print(machine())
    base = Path(tempfile.mkdtemp(prefix="fathom-bench-symbols-"))
    try:
        root = base / "httpx"
        shutil.copytree(
            Path(httpx.__file__).parent, root, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
        fathom = Fathom(Settings(data_dir=base / "data"), encoder=HashEncoder())
        start = time.perf_counter()
        report = asyncio.run(fathom.index(root, "httpx"))
        index_s = time.perf_counter() - start
        table_ = symbols.table_of(fathom)
        print(
            f"httpx {httpx.__version__}: {report.files} files, "
            f"{report.tables.get('code', 0)} code chunks, indexed in {index_s:.1f} s "
            f"(hash encoder; the symbol table built at its end)"
        )

        def build() -> None:
            table_.forget("httpx")
            table_.refresh(fathom.store, "httpx")

        def one_file() -> None:
            with sqlite3.connect(table_.path) as conn:  # as if _models.py had been re-indexed
                conn.execute("UPDATE files SET key = '' WHERE path = '_models.py'")
                conn.execute("UPDATE projects SET digest = ''")
            table_.refresh(fathom.store, "httpx")

        rows = [
            row("build the whole table (23 files parsed)", timed(build, max(3, args.runs // 5))),
            row("refresh, one file changed", timed(one_file, args.runs)),
            row(
                "refresh, nothing changed (manifest read + digest)",
                timed(lambda: table_.refresh(fathom.store, "httpx"), args.runs),
            ),
        ]
        for name, call in (
            ("find_symbol('AsyncClient.send')", lambda: symbols.find_symbol(fathom, "AsyncClient.send")),
            ("find_references('_merge_cookies')", lambda: symbols.find_references(fathom, "_merge_cookies")),
            ("find_references('self')", lambda: symbols.find_references(fathom, "self")),
            ("outline('_client.py')", lambda: symbols.outline(fathom, "_client.py")),
        ):
            rows.append(row(f"service {name}", timed(call, args.runs)))
        rows += asyncio.run(over_mcp(fathom, args.runs))
        size = table_.path.stat().st_size / 1024
        print(table(["what", "runs", "p50 ms", "p95 ms"], rows))
        counts = (
            sqlite3.connect(table_.path)
            .execute("SELECT (SELECT count(*) FROM symbols), (SELECT count(*) FROM refs)")
            .fetchone()
        )
        print(f"symbols.sqlite: {size:.0f} KiB, {counts[0]} definitions, {counts[1]} occurrences")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
