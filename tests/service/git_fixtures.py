"""Git remotes for tests: bare repositories built with the `git` command line, served over
file:// and over HTTP on 127.0.0.1 by `git http-backend` (CGI) behind a small threaded server,
which can demand basic auth; and a remote of a small shop project with a `feature` branch
(`build_remote`)."""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HTTP_BACKEND = "/usr/lib/git-core/git-http-backend"
ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
}


def git(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, env={**os.environ, **ENV}, check=True
    )
    return done.stdout.strip()


class Remote:
    """A bare repository and a working clone that commits and pushes to it."""

    def __init__(self, root: Path):
        self.bare = root / "remote.git"
        self.work = root / "work"
        git("init", "--bare", "--quiet", "-b", "main", str(self.bare))
        git("config", "http.receivepack", "false", cwd=self.bare)
        git("clone", "--quiet", str(self.bare), str(self.work))
        git("checkout", "--quiet", "-B", "main", cwd=self.work)

    @property
    def file_url(self) -> str:
        return self.bare.as_uri()

    def commit(self, files: dict[str, str | None], message: str = "change", branch: str = "main") -> str:
        if git("symbolic-ref", "--short", "HEAD", cwd=self.work) != branch:
            git("checkout", "--quiet", branch, cwd=self.work)
        for path, text in files.items():
            target = self.work / path
            if text is None:
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
        git("add", "-A", cwd=self.work)
        git("commit", "--quiet", "-m", message, cwd=self.work)
        git("push", "--quiet", "origin", f"{branch}:{branch}", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)

    def branch(self, name: str, start: str = "main") -> None:
        git("checkout", "--quiet", "-b", name, start, cwd=self.work)
        git("push", "--quiet", "origin", f"{name}:{name}", cwd=self.work)


def _handler(project_root: Path, credentials: tuple[str, str] | None):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _serve(self) -> None:
            if credentials is not None:
                want = "Basic " + base64.b64encode(":".join(credentials).encode()).decode()
                if self.headers.get("Authorization") != want:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="git"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
            path, _, query = self.path.partition("?")
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            env = {
                "GIT_PROJECT_ROOT": str(project_root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "REQUEST_METHOD": self.command,
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(length),
                "REMOTE_ADDR": "127.0.0.1",
                "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            }
            done = subprocess.run([HTTP_BACKEND], input=body, env=env, capture_output=True, check=False)
            head, _, payload = done.stdout.partition(b"\r\n\r\n")
            status = 200
            headers = []
            for line in head.split(b"\r\n"):
                name, _, value = line.decode("latin-1").partition(":")
                if name.lower() == "status":
                    status = int(value.strip().split()[0])
                elif name:
                    headers.append((name, value.strip()))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _serve

    return Handler


@contextlib.contextmanager
def http_remote(project_root: Path, credentials: tuple[str, str] | None = None) -> Iterator[str]:
    """`git http-backend` serving the bare repositories under `project_root` at the URL
    yielded (http://127.0.0.1:PORT/)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(project_root, credentials))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


TOPICS = [
    "invoice",
    "shipment",
    "customer",
    "warehouse",
    "payment",
    "discount",
    "refund",
    "catalog",
    "inventory",
    "supplier",
    "coupon",
    "address",
    "session",
    "report",
    "currency",
    "schedule",
    "basket",
    "review",
    "ticket",
    "audit",
    "carrier",
    "voucher",
    "employee",
    "contract",
    "budget",
    "forecast",
    "delivery",
    "quote",
    "warranty",
    "subscription",
    "promotion",
    "region",
]

FEATURE_FUNCTION = '''

def reconcile_ledger_entries(ledger, bank_statement):
    """Match each ledger entry with the bank statement line of the same amount and date."""
    unmatched = []
    for entry in ledger:
        if not any(line.amount == entry.amount and line.date == entry.date
                   for line in bank_statement):
            unmatched.append(entry)
    return unmatched
'''


def module_text(topic: str) -> str:
    parts = [f'"""Operations on {topic} records."""\n']
    for i, verb in enumerate(["create", "load", "update", "archive", "validate", "summarise"]):
        parts.append(f'''

def {verb}_{topic}(store, record_id, payload=None):
    """{verb.capitalize()} one {topic} record ({i}): look it up, check its fields, save it."""
    record = store.get("{topic}", record_id) or {{}}
    if payload:
        record.update({{k: v for k, v in payload.items() if k != "id"}})
    record["{verb}_count"] = record.get("{verb}_count", 0) + {i + 1}
    store.put("{topic}", record_id, record)
    return record
''')
    return "".join(parts)


def build_remote(root: Path) -> Remote:
    remote = Remote(root)
    remote.commit(
        {f"shop/{t}.py": module_text(t) for t in TOPICS} | {"README.md": "# Shop\n\nA shop's back office.\n"},
        "first",
    )
    remote.branch("feature")
    remote.commit({"shop/payment.py": module_text("payment") + FEATURE_FUNCTION}, "ledger", branch="feature")
    return remote
