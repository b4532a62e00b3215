"""Shared retrieval fixtures: one MiniLM encoder per test session, and a small fixture project."""

from __future__ import annotations

from pathlib import Path

import pytest

from fathom.config import Settings
from fathom.inference.local import LocalEncoder


@pytest.fixture(scope="session")
def local_encoder(minilm_path: str) -> LocalEncoder:
    """The embedded reference encoder, loaded once for the whole session."""
    settings = Settings()
    enc = LocalEncoder(
        minilm_path,
        model_name=settings.local_model_name,
        width=settings.local_width,
        batch_size=32,
    )
    enc.load()
    return enc


@pytest.fixture(scope="session")
def torch_encoder(local_encoder: LocalEncoder) -> LocalEncoder:
    """The same encoder, as the tests that set the ONNX runtime beside it name it."""
    return local_encoder


SAMPLE_FILES: dict[str, str] = {
    "billing/invoice.py": '''"""Invoices: totals, taxes and rendering."""


class Invoice:
    """An invoice with line items."""

    def __init__(self, customer, items):
        self.customer = customer
        self.items = items

    def total(self):
        """Sum of the line item prices times their quantities."""
        return sum(item.price * item.quantity for item in self.items)

    def apply_tax(self, rate):
        """Add value-added tax to the invoice total."""
        return self.total() * (1 + rate)
''',
    "net/retry.py": '''"""Retrying flaky network calls with exponential backoff."""

import random
import time


def retry_with_backoff(call, attempts=5, base_delay=0.1):
    """Call `call` until it succeeds, sleeping exponentially longer after each failure."""
    for attempt in range(attempts):
        try:
            return call()
        except ConnectionError:
            time.sleep(base_delay * (2 ** attempt) + random.random() * base_delay)
    raise TimeoutError("gave up after retries")
''',
    "auth/password.py": '''"""Password hashing and verification."""

import hashlib
import hmac
import os


def hash_password(password: str) -> str:
    """Hash a password with a random salt using PBKDF2."""
    salt = os.urandom(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, 100_000)
    return salt.hex() + ":" + digest.hex()


def verify_password(password: str, stored: str) -> bool:
    """Check a password against its stored salted hash in constant time."""
    salt_hex, digest_hex = stored.split(":")
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), bytes.fromhex(salt_hex), 100_000)
    return hmac.compare_digest(digest.hex(), digest_hex)
''',
    "web/server.js": """// A tiny HTTP server that greets visitors.
const http = require("http");

function handleRequest(req, res) {
  res.writeHead(200, { "Content-Type": "text/plain" });
  res.end("Hello, visitor!");
}

http.createServer(handleRequest).listen(8080);
""",
    "README.md": """# Sample shop

A small shop backend used in tests.

## Installation

Run `pip install -e .` and then start the server with `python -m shop`.

## Configuration

Set the `SHOP_DATABASE_URL` environment variable to point at your database.
""",
}


def write_project(root: Path, files: dict[str, str] | None = None) -> Path:
    for rel, text in (files or SAMPLE_FILES).items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def index_sample(base: Path, encoder: LocalEncoder) -> tuple[Path, Path]:
    """The sample project written under `base` and indexed as `shop` into `base / "data"`:
    (data dir, project root)."""
    import asyncio

    from fathom.service import Fathom

    root = write_project(base / "shop")
    data = base / "data"
    asyncio.run(Fathom(Settings(data_dir=data), encoder=encoder).index(root, "shop"))
    return data, root


@pytest.fixture
def sample_project(tmp_path: Path) -> Path:
    """A handful of files: three Python modules, one JavaScript file, one README."""
    return write_project(tmp_path / "shop")


class CountingEncoder:
    """Wraps a real encoder at the Provider cut-off: counts the texts it embeds, and can fail
    after a number of batches (a process dying mid-run, as the indexer sees it). The gate's
    probe set is counted apart, in `probes` (a restarted service re-probes the encoder it
    cleared before it writes again), so `texts` and `batches` are the index work alone."""

    def __new__(cls, inner, *, fail_after_batches: int | None = None, provider_id: str | None = None):
        import dataclasses

        from fathom.inference.provider import Provider

        class _Counting(Provider):
            def __init__(self) -> None:
                self.inner = inner
                self.info = (
                    inner.info if provider_id is None else dataclasses.replace(inner.info, id=provider_id)
                )
                self.texts: list[str] = []
                self.batches = 0
                self.probes = 0

            def __getattr__(self, name):
                # Transparent like the product's wrappers: the inner model's tokenizer (chunk
                # sizes), batch size and the rest come from the encoder it wraps.
                return getattr(inner, name)

            async def embed(self, texts):
                from fathom.inference.probes import load_probes

                if list(texts) == list(load_probes().texts):
                    self.probes += 1
                    return await inner.embed(texts)
                if fail_after_batches is not None and self.batches >= fail_after_batches:
                    raise RuntimeError("encoder process killed (injected)")
                self.batches += 1
                self.texts.extend(texts)
                return await inner.embed(texts)

        return _Counting()
