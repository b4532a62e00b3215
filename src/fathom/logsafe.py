"""Keeping secrets out of log records, whichever logger or handler they pass through.

This module owns one guarantee: no log record emitted in a process that called `install()`
carries anything shaped like an OpenRouter key (`sk-or-...`), a bearer credential (websockets
dumps handshake headers, `Authorization` included, at DEBUG) or a sidecar credential
(`fsc_...`), and no WebSocket frame dump
(websockets and uvicorn log every frame at DEBUG, payload included) carries frame content.
It works at record creation (a record factory), so it covers loggers and handlers that did not
exist yet when it was installed — pytest's capture, uvicorn's own handlers, a user's
`logging.basicConfig` — which a per-handler filter would miss.

It refuses to be the first line of defence: code never passes a key to a logger or an exception
in the first place. This is the net under that rule, not a substitute for it.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

# OpenRouter keys look like `sk-or-v1-<64 hex>`. Match any `sk-or-` prefix and whatever
# key-shaped characters follow, so a truncated or partial key is scrubbed as well.
SECRET_RE = re.compile(r"sk-or-[A-Za-z0-9_\-]*")
REDACTED = "sk-or-***"
# Bearer credentials (join, host and admin tokens): websockets dumps handshake headers at DEBUG.
BEARER_RE = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=\-]+")
# A sidecar's own credential (`fleet.identity`): never logged on purpose; scrubbed if it slips.
CREDENTIAL_RE = re.compile(r"\bfsc_[A-Za-z0-9_\-]+")

# Loggers whose DEBUG frame dumps ("> TEXT '{...}' [n bytes]") would carry frame payloads:
# command texts, and the key inside a config frame. Their frame lines are kept, content elided.
_FRAME_DUMP_LOGGERS = ("uvicorn.error", "websockets", "fathom.fleet.wire")
_FRAME_DUMP_FORMATS = ("> %s", "< %s")

_lock = threading.Lock()
_installed = False


def scrub(text: str) -> str:
    """`text` with every key-shaped substring, bearer credential and sidecar credential replaced."""
    return CREDENTIAL_RE.sub("fsc_***", BEARER_RE.sub(r"\1***", SECRET_RE.sub(REDACTED, text)))


def _needs_scrub(text: str) -> bool:
    return bool(SECRET_RE.search(text) or BEARER_RE.search(text) or CREDENTIAL_RE.search(text))


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
        except Exception:  # noqa: BLE001 - a broken format string is logging's problem, not ours
            message = str(record.msg)
        if _needs_scrub(message):
            record.msg = scrub(message)
            record.args = ()
    if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
        # Format the traceback now, scrubbed; Formatter reuses exc_text instead of re-rendering.
        record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
    elif record.exc_text:
        record.exc_text = scrub(record.exc_text)
    if record.stack_info:
        record.stack_info = scrub(record.stack_info)
    return record


class SecretScrubber(logging.Filter):
    """The same scrub as a handler filter, for handlers in processes that did not `install()`."""

    def filter(self, record: logging.LogRecord) -> bool:
        sanitize(record)
        return True


def install() -> None:
    """Make every log record of this process pass through `sanitize` (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            return sanitize(previous(*args, **kwargs))

        factory.fathom_logsafe = True  # type: ignore[attr-defined]
        logging.setLogRecordFactory(factory)
        _installed = True


def installed() -> bool:
    return bool(getattr(logging.getLogRecordFactory(), "fathom_logsafe", False))
