"""Keeping secrets out of log records, whichever logger or handler they pass through.

This module owns one guarantee: no log record emitted in a process that called `install()`
carries anything shaped like an OpenRouter key (`sk-or-...`), a bearer credential or any other
`Authorization` value (websockets dumps handshake headers at DEBUG), one of Fathom's tokens
(`fa_`, `fj_`, `fh_`, `fm_`, `fs_`), a sidecar credential (`fsc_...`), a JWT (`eyJ….eyJ….sig`:
an OAuth access or ID token, wherever it sits), or the value of a query parameter whose name
says it holds a secret (`?access_token=`, `?code=`, `?api_key=`, `?client_secret=`, `?sig=`, …:
uvicorn's access log writes each request's path with its query string, and a client may put a
token there); and no WebSocket frame dump (websockets and uvicorn log every frame at DEBUG,
payload included) carries frame content. `scrub` is the one place these shapes are known: the
access log, the application's own logs (text or JSON lines) and the audit log (`server.audit`)
all pass through it.
It works at record creation (a record factory), so it covers loggers and handlers that did not
exist yet when it was installed — pytest's capture, uvicorn's own handlers, a user's
`logging.basicConfig` — which a per-handler filter would miss.

It refuses to be the first line of defence: code never passes a key to a logger or an exception
in the first place. This is the net under that rule, not a substitute for it.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
from datetime import UTC, datetime
from typing import Any, TextIO

# OpenRouter keys look like `sk-or-v1-<64 hex>`. Match any `sk-or-` prefix and whatever
# key-shaped characters follow, so a truncated or partial key is scrubbed as well.
SECRET_RE = re.compile(r"sk-or-[A-Za-z0-9_\-]*")
REDACTED = "sk-or-***"
# Bearer credentials (join, host and admin tokens): websockets dumps handshake headers at DEBUG.
BEARER_RE = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=\-]+")
# A sidecar's own credential (`fleet.identity`): never logged on purpose; scrubbed if it slips.
CREDENTIAL_RE = re.compile(r"\bfsc_[A-Za-z0-9_\-]+")
# Fathom's own tokens wherever they appear, not only after "Bearer": admin (fa_), join (fj_),
# host (fh_), MCP (fm_) and scrape (fs_) tokens, as issued (32 random bytes, URL-safe).
TOKEN_RE = re.compile(r"\b(f[ajhms])_[A-Za-z0-9_\-]{16,}")
# A JWT or JWE (OAuth access, refresh and ID tokens): base64url JSON header `eyJ…`, then dots.
JWT_RE = re.compile(r"\beyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]{2,}(?:\.[A-Za-z0-9_\-]*)*")
# Whatever scheme an `Authorization` header names (Basic, DPoP, token, …), as headers are dumped.
AUTHORIZATION_RE = re.compile(r"(?i)\b((?:proxy-)?authorization:\s*[A-Za-z][\w-]*\s+)[^\s,;'\"]+")
# Words that, inside a header's or a query parameter's name, say its value is a credential.
_SECRET_NAME = r"(?:key|token|secret|passw(?:or)?d|pwd|auth|credential|signature|sig|session|cookie"
# A dumped header (`< name: value`, `> name: value`: websockets logs a handshake's headers at
# DEBUG, on the server and the sidecar) named like a credential: its value goes (an
# `Authorization` value keeps its scheme, above). A browser's WebSocket client can pass a token
# only in `Sec-WebSocket-Protocol`.
SECRET_HEADER_RE = re.compile(
    rf"(?im)^([<>] (?!(?:proxy-)?authorization:)[\w-]*{_SECRET_NAME}"
    r"|sec-websocket-protocol)[\w-]*:[ \t]*)\S.*$"
)
# A query parameter named like a secret: its value is never written, whatever it looks like (an
# OAuth `code` or `state`, a `client_secret`, a signed URL's `sig`, `?key=`, `?access_token=`,
# ...). The name may be percent-encoded or bracketed (`auth[token]`).
SECRET_QUERY_RE = re.compile(
    rf"(?i)((?:^|[?&;\s])[\w.\-\[\]%]*{_SECRET_NAME}"
    r"|code|assertion|jwt|state|nonce|otp|ticket)[\w.\-\[\]%]*=)[^&;\s#'\"]*"
)

# Loggers whose DEBUG frame dumps ("> TEXT '{...}' [n bytes]") would carry frame payloads:
# command texts, and the key inside a config frame. Their frame lines are kept, content elided.
_FRAME_DUMP_LOGGERS = ("uvicorn.error", "websockets", "fathom.fleet.wire")
_FRAME_DUMP_FORMATS = ("> %s", "< %s")

_lock = threading.Lock()
_installed = False


def scrub(text: str) -> str:
    """`text` with every key-shaped substring, credential, token, JWT and secret-named query
    value replaced."""
    text = SECRET_QUERY_RE.sub(r"\1***", AUTHORIZATION_RE.sub(r"\1***", SECRET_HEADER_RE.sub(r"\1***", text)))
    text = CREDENTIAL_RE.sub("fsc_***", BEARER_RE.sub(r"\1***", SECRET_RE.sub(REDACTED, text)))
    return JWT_RE.sub("eyJ***", TOKEN_RE.sub(r"\1_***", text))


def _is_frame_dump(record: logging.LogRecord) -> bool:
    if record.msg not in _FRAME_DUMP_FORMATS:
        return False
    return any(record.name == n or record.name.startswith(n + ".") for n in _FRAME_DUMP_LOGGERS)


def sanitize(record: logging.LogRecord) -> logging.LogRecord:
    """Scrub `record` in place: message, arguments, exception and stack text."""
    if _is_frame_dump(record):
        record.msg = f"{record.msg[0]} frame (content not logged)"
        record.args = ()
    else:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is logging's problem, not ours
            message = str(record.msg)
        scrubbed = scrub(message)
        if scrubbed != message:
            record.msg = scrubbed
            record.args = ()
    if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
        # Format the traceback now, scrubbed; Formatter reuses exc_text instead of re-rendering.
        record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
    elif record.exc_text:
        record.exc_text = scrub(record.exc_text)
    if record.stack_info:
        record.stack_info = scrub(record.stack_info)
    return record


def install() -> None:
    """Make every log record of this process pass through `sanitize` (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            return sanitize(previous(*args, **kwargs))

        factory.fathom_logsafe = True  # type: ignore[attr-defined]  # a mark on the function
        logging.setLogRecordFactory(factory)
        _installed = True


LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log collectors: time (UTC, ISO 8601), level, logger,
    message, and the traceback when there is one. Records reach it already scrubbed (`install`);
    the text is scrubbed again here, so a record made before `install()` is covered too."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": scrub(record.getMessage()),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exc"] = scrub(record.exc_text)
        if record.stack_info:
            entry["stack"] = scrub(record.stack_info)
        return json.dumps(entry, ensure_ascii=False)  # one line: newlines inside are escaped


class _Stderr(logging.StreamHandler[TextIO]):
    """Writes to `sys.stderr` as it is at each record, not as it was at start-up (a stream
    swapped and closed since, as a command run in-process leaves it, is never written to)."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


_handler: logging.Handler | None = None


def configure(level: str = "INFO", log_format: str = "text") -> None:
    """The logging of a server or sidecar process: scrubbed (`install`), on stderr, as text lines
    or one JSON object per line (`--log-format json`)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"unknown log format {log_format!r}: use text or json")
    global _handler
    install()
    handler = _Stderr()
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.setLevel(level.upper())
    # Replace only the handler an earlier call installed: the root's other handlers (a test
    # runner's capture, an embedding program's own) are not ours to remove.
    if _handler is not None:
        root.removeHandler(_handler)
    root.addHandler(handler)
    _handler = handler


def installed() -> bool:
    return bool(getattr(logging.getLogRecordFactory(), "fathom_logsafe", False))
