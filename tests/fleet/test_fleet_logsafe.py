"""The log scrubber installed by the server and the sidecar: key-shaped strings, bearer and other
`Authorization` credentials, JWTs, secret-named query values and headers, and WebSocket frame
contents never reach a handler, whoever logs them."""

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


def test_jwts_secret_named_query_values_and_credential_headers_are_scrubbed():
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl"
    # uvicorn's access line, as it formats it: the path with its query string.
    out = capture(
        "uvicorn.access",
        '%s - "%s %s HTTP/%s" %d',
        "127.0.0.1:5000",
        "GET",
        "/cb?code=Splx10&state=af0ifjs&next=/home&client_secret=hunter2&auth%5Btoken%5D=t0k",
        "1.1",
        200,
    )
    assert "code=***&state=***&next=/home&client_secret=***&auth%5Btoken%5D=***" in out, out
    assert not any(s in out for s in ("Splx10", "af0ifjs", "hunter2", "t0k"))
    # A JWT under any name, or none; an Authorization value of any scheme keeps only its scheme.
    out = capture("httpx", "HTTP Request: GET %s then %s", f"https://idp.example/x?q={jwt}", jwt)
    assert "q=eyJ*** then eyJ***" in out and "c2lnbmF0dXJl" not in out
    assert (
        capture("websockets.client", "> Authorization: Basic dXNlcjpwYXNz") == "> Authorization: Basic ***\n"
    )
    # A handshake's headers named like a credential, as websockets dumps them at DEBUG.
    for header in (f"< sec-websocket-protocol: {jwt}", "< x-api-key: k3y-value", "< cookie: session=s3ss"):
        out = capture("uvicorn.error", "%s", header)
        assert out.endswith(": ***\n") and not any(s in out for s in ("eyJhbG", "k3y", "s3ss")), out
    assert capture("uvicorn.error", "< host: 127.0.0.1:8765") == "< host: 127.0.0.1:8765\n"  # others are kept
