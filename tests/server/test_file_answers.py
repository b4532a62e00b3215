"""File-level answers: `search_code` groups its results by file (`files`) and says in its text
when one file holds several of them, through a real MCP session over the real encoder."""

from __future__ import annotations

import asyncio

import pytest
from mcp import Client

from fathom.config import Settings
from fathom.index.results import files_line, files_of
from fathom.server.mcp_tools import build_mcp_server
from fathom.service import Fathom
from tests.index.retrieval_fixtures import write_project

FILES = {
    "auth/password.py": '''import hashlib
import hmac
import os


def hash_password(password: str) -> str:
    """Hash a password with a random salt."""
    salt = os.urandom(16)
    return salt.hex() + hashlib.sha256(salt + password.encode()).hexdigest()


def verify_password(password: str, stored: str) -> bool:
    """Check a password against its stored salted hash."""
    salt = bytes.fromhex(stored[:32])
    digest = hashlib.sha256(salt + password.encode()).hexdigest()
    return hmac.compare_digest(digest, stored[32:])


def password_strength(password: str) -> int:
    """Score a password from 0 to 4 by length and character classes."""
    return sum([len(password) >= 12, any(c.isdigit() for c in password),
                any(c.isupper() for c in password), any(not c.isalnum() for c in password)])
''',
    "shop/cart.py": '''class Cart:
    """A shopping cart holding items and quantities."""

    def add(self, item, quantity=1):
        self.items[item] = self.items.get(item, 0) + quantity
''',
}


class _Hit:
    def __init__(self, path: str, project: str = "p"):
        self.path, self.project = path, project


def test_files_of_groups_by_file_best_first():
    hits = [_Hit("a.py"), _Hit("b.py"), _Hit("b.py"), _Hit("c.py"), _Hit("b.py")]
    by_best = files_of(hits)
    assert [(f.path, f.hits, f.best_rank) for f in by_best] == [
        ("a.py", 1, 1),
        ("b.py", 3, 2),
        ("c.py", 1, 4),
    ]
    # With support, a file holding many hits can pass one whose single hit ranks higher.
    supported = files_of(hits, support=1.0)
    assert [f.path for f in supported] == ["b.py", "a.py", "c.py"]
    assert supported[0].score == pytest.approx(1 / 2 + 1 / 3 + 1 / 5)
    assert files_line(by_best, 5) == "3 of the top 5 hits are in p:b.py."
    assert files_line(files_of([_Hit("a.py"), _Hit("b.py")]), 2) is None


@pytest.mark.slow
async def test_search_code_names_the_file_holding_several_hits(tmp_path, local_encoder):
    root = write_project(tmp_path / "app", FILES)
    fathom = Fathom(Settings(data_dir=tmp_path / "data"), encoder=local_encoder)
    await fathom.index(root, "app")
    async with asyncio.timeout(120):
        async with Client(build_mcp_server(fathom)) as client:
            # A result per chunk: a file may hold several of them, and the answer says so.
            res = await client.call_tool(
                "search_code",
                {"query": "password hashing and checking", "project": "app", "k": 4, "group": "chunk"},
            )
            per_file = await client.call_tool(
                "search_code", {"query": "password hashing and checking", "project": "app", "k": 4}
            )
    assert not res.is_error
    answer = res.structured_content
    in_file = [r for r in answer["results"] if r["path"] == "auth/password.py"]
    assert len(in_file) >= 2
    first = answer["files"][0]
    assert first == {"project": "app", "path": "auth/password.py", "hits": len(in_file), "best_rank": 1}
    assert sum(f["hits"] for f in answer["files"]) == len(answer["results"])
    text = res.content[0].text
    assert (
        f"{len(in_file)} of the top {len(answer['results'])} hits are in app:auth/password.py."
        in text.splitlines()[1]
    )
    # By default, one result per file: the file once, its other hits as its ranges.
    files = per_file.structured_content["results"]
    assert len({r["path"] for r in files}) == len(files)
    top = files[0]
    assert top["path"] == "auth/password.py" and len(top["also"]) == len(in_file) - 1
