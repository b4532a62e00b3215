"""A sidecar's identity: a secret of its own, made at its first start and kept in its state dir.

A sidecar name is only a label anyone holding the shared join token can type. What the server
binds an approval to is this credential: 256 random bits the sidecar generates once and keeps
in `<state dir>/credential` (mode 0600, in a 0700 folder), and presents in its register frame
on every connection. The server keeps only its hash (`fleet.auth`), so a connection under an
approved name with any other credential is a different host claiming the name.

This module owns the credential's shape, where it lives and how it is made and read. It
refuses to invent a new identity when the file is damaged: a garbled credential file is an
error naming the fix, never silently replaced (a new credential would turn the real sidecar
into a claimant of its own name). It never logs or shows the credential.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

from fathom.errors import ConfigError

CREDENTIAL_FILE = "credential"
CREDENTIAL_PREFIX = "fsc_"
CREDENTIAL_RE = re.compile(r"^fsc_[A-Za-z0-9_-]{43}$")
STATE_DIR_ENV = "FATHOM_SIDECAR_STATE_DIR"


def default_state_dir() -> Path:
    """`$FATHOM_SIDECAR_STATE_DIR`, else `~/.fathom-sidecar`."""
    from fathom.config import Settings

    return Settings().sidecar_state_dir.expanduser()


def new_credential() -> str:
    return CREDENTIAL_PREFIX + secrets.token_urlsafe(32)


def is_credential(value: str) -> bool:
    return bool(CREDENTIAL_RE.match(value))


def load_or_create_credential(state_dir: Path) -> str:
    """The credential kept in `state_dir`, made (atomically, private) on the first call."""
    state_dir = Path(state_dir)
    path = state_dir / CREDENTIAL_FILE
    try:
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not path.exists():
            _create(path)
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except OSError as exc:
        raise ConfigError(
            f"cannot read or create the sidecar credential in {state_dir} "
            f"({exc.strerror or type(exc).__name__}); give a writable folder with --state-dir "
            f"or {STATE_DIR_ENV}"
        ) from None
    if not is_credential(text):
        raise ConfigError(
            f"{path} is not a valid sidecar credential file. Restore it from a backup; or, if this "
            f"host must start over with a new identity, move the file aside, start the sidecar, and "
            f"have an operator hand it its name again (`fathom fleet approve NAME --rebind`)."
        )
    return text


def _create(path: Path) -> None:
    """Write a new credential with O_EXCL, so two sidecars starting at once keep one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(new_credential() + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)  # fails if another process made one first: theirs is kept
        except FileExistsError:
            pass
    finally:
        tmp.unlink(missing_ok=True)
