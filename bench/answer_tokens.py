"""What counting an answer's tokens costs a search: each piece once, or every text whole.

    .venv/bin/python bench/answer_tokens.py [--project PATH] [--rounds N]

Indexes PATH (default: the installed `rich` package, copied) with the default encoder into a
fresh data dir, then runs `search_code` through an in-memory MCP client for a dozen queries,
in alternating rounds, with the answer counter in each of its ways: by pieces between
quotes, each counted once and remembered (what the server does with a BERT-style tokenizer);
the same with nothing remembered from one search to the next (each search's pieces counted
once: what a query never seen before costs); and every text whole (what it did before, and
does with any other tokenizer). All use the default model's tokenizer. Prints per way the median round trip of a search, the characters
handed to the tokenizer per search, and whether every page came out the same (the same hits
and the same `tokens`: counting by pieces is exact, so they must).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp import Client
from tokenizers import Tokenizer

from fathom.config import Settings
from fathom.server import search_pages
from fathom.server.answer_tokens import AnswerTokens
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom

QUERIES = [
    "render a table with borders",
    "parse markup tags in text",
    "measure the width of a string in cells",
    "progress bar with estimated time",
    "syntax highlighting of source code",
    "pretty print nested data structures",
    "live display that refreshes",
    "export console output to html",
    "wrap text to a width",
    "color from a hex string",
    "traceback with local variables",
    "prompt the user for a value",
]


class Counted:
    """The tokenizer, with the characters it is asked to encode added up."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.chars = 0

    def encode_batch(self, texts: list[str], **kwargs: Any) -> Any:
        self.chars += sum(len(t) for t in texts)
        return self.tokenizer.encode_batch(texts, **kwargs)


async def measure(project: Path, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(shutil.copytree(project, Path(tmp) / project.name))
        settings = Settings(data_dir=Path(tmp) / "data")
        fathom = Fathom(settings)
        start = time.perf_counter()
        await fathom.index(root, "bench")
        print(f"indexed {project} in {time.perf_counter() - start:.0f} s")
        tok = Tokenizer.from_file(str(Path(settings.local_model_path) / "tokenizer.json"))
        tok.no_padding()
        tok.no_truncation()
        counted = {way: Counted(tok) for way in ("by pieces", "by pieces, nothing kept", "whole")}

        def counter(way: str) -> Any:
            if way == "by pieces, nothing kept":  # a new counter each search: it remembers nothing
                return lambda service: AnswerTokens(counted[way], key=way, by_pieces=True)
            kept = AnswerTokens(counted[way], key=way, by_pieces=way == "by pieces")
            return lambda service: kept

        ways = {way: counter(way) for way in counted}
        times: dict[str, list[float]] = {way: [] for way in ways}
        pages: dict[str, list[Any]] = {way: [] for way in ways}
        async with Client(build_mcp_server(fathom)) as client:
            for query in QUERIES:  # one search each first: tables open, caches filled
                await client.call_tool("search_code", {"query": query, "k": 10})
            for r in range(rounds):
                for way in list(ways) if r % 2 == 0 else list(ways)[::-1]:
                    search_pages.tokens_of = ways[way]
                    for query in QUERIES:
                        start = time.perf_counter()
                        answer = await client.call_tool("search_code", {"query": query, "k": 10})
                        times[way].append((time.perf_counter() - start) * 1000)
                        got = answer.structured_content or {}
                        pages[way].append(([h["id"] for h in got.get("results", [])], got.get("tokens")))
        searches = rounds * len(QUERIES)
        for way in ways:
            chars = counted[way].chars / searches
            print(
                f"{way:10} median search_code {statistics.median(times[way]):6.2f} ms, {chars:8,.0f} characters tokenized a search"
            )
        pieces, cold, whole = (statistics.median(times[w]) for w in ways)
        print(f"ratios to whole: by pieces {pieces / whole:.2f}, nothing kept {cold / whole:.2f}")
        same = pages["by pieces"] == pages["whole"] == pages["by pieces, nothing kept"]
        print(f"every page the same hits and the same token count: {same}")


def main() -> None:
    import rich

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, default=Path(rich.__file__).parent)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    asyncio.run(measure(args.project, args.rounds))


if __name__ == "__main__":
    main()
