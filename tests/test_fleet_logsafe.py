"""The log scrubber installed by the server and the sidecar: key-shaped strings, bearer
credentials and WebSocket frame contents never reach a handler, whoever logs them."""

from __future__ import annotations

import io
import logging

from fathom import logsafe


def capture(logger_name: str, *args, exc: BaseException | None = None) -> str:
    logsafe.install()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        if exc is not None:
            try:
                raise exc
            except BaseException:
                logger.exception(*args)
        else:
            logger.debug(*args)
    finally:
        logger.removeHandler(handler)
    return stream.getvalue()


def test_key_shaped_strings_are_scrubbed_in_messages_args_and_tracebacks():
    key = "sk-or-v1-" + "f" * 64
    assert key not in capture("anything", "pushing %s now", key)
    assert "sk-or-***" in capture("anything", "pushing %s now", key)
    assert key[:20] not in capture("anything", "partial %s", key[:20])
    out = capture("anything", "failed", exc=RuntimeError(f"bad key {key}"))
    assert "RuntimeError" in out and key not in out


def test_bearer_credentials_are_scrubbed():
    out = capture("websockets.client", "> Authorization: Bearer fj_secret-join.token")
    assert "fj_secret" not in out and "Bearer ***" in out


def test_frame_dumps_keep_the_line_but_not_the_content():
    class Frame:
        def __str__(self):
            return 'TEXT \'{"type":"config","key":"abc123"}\' [40 bytes]'

    for name in ("uvicorn.error", "websockets.client", "fathom.fleet.wire"):
        out = capture(name, "> %s", Frame())
        assert "abc123" not in out and "frame (content not logged)" in out
    # Other loggers' "> %s" lines are ordinary messages.
    assert "abc123" in capture("fathom.other", "> %s", Frame())


def test_install_is_idempotent():
    logsafe.install()
    logsafe.install()
    assert logsafe.installed()
    assert "sk-or-***" in capture("x", "sk-or-v1-abc")


def test_fathom_tokens_are_scrubbed_wherever_they_appear():
    from fathom.fleet.auth import new_token

    for prefix in ("fa", "fj", "fh", "fm", "fs"):
        token = new_token(prefix)
        out = capture("anything", "issued %s for dev", token)
        assert token not in out and f"{prefix}_***" in out
    assert "fm_short" in capture("anything", "fm_short is not token-shaped")  # names stay readable
