"""The OpenRouter key stays secret: it appears in no log line (every logger
captured at DEBUG, httpx and httpcore included), no exception message or repr, no repr or str
of the client or provider, and the emulator keeps only its hash."""

from __future__ import annotations

import logging
import pickle

import pytest

from fathom.devtools.emulator import MINILM, key_hash
from fathom.inference.openrouter import OpenRouterClient, OpenRouterError, OpenRouterProvider, pin
from fathom.roles import Role

CANARY = "sk-or-v1-CANARY-7f3a9c1e5b2d4f60a8e1c3b5d7f9a2c4"


class _Everything(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))
        self.lines.append(repr(record.args))
        self.lines.append(repr(record.__dict__))


@pytest.fixture
def all_logs():
    handler = _Everything()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    touched = []
    for name in (
        "httpx",
        "httpcore",
        "httpcore.http11",
        "httpcore.connection",
        "uvicorn",
        "uvicorn.access",
        "uvicorn.error",
        "fastapi",
        "asyncio",
        "fathom",
    ):
        lg = logging.getLogger(name)
        touched.append((lg, lg.level, lg.propagate, lg.disabled))
        lg.setLevel(logging.DEBUG)
        lg.propagate = True
        lg.disabled = False
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        for lg, level, propagate, disabled in touched:
            lg.setLevel(level)
            lg.propagate = propagate
            lg.disabled = disabled


async def test_the_key_is_in_no_log_exception_or_repr(emulator, all_logs):
    emulator.control.set_keys(management=[])
    seen_errors: list[BaseException] = []
    async with OpenRouterClient(CANARY, base_url=emulator.base_url) as client:
        provider = OpenRouterProvider(
            client, model=MINILM, roles=[Role.EMBEDDING], upstream="alpha", width=384
        )
        await provider.embed(["hello"])
        await client.chat("m/x", [{"role": "user", "content": "hi"}], stream=True)
        await client.key_info()
        assert await client.credits() is None  # a 403 on the way
        for arm in (
            lambda: emulator.control.fail(status=500),
            lambda: emulator.control.in_flight_402(),
            lambda: emulator.control.credits_402(),
            lambda: emulator.control.corrupt("truncate"),
            lambda: emulator.control.set_limits(rpm=1),
        ):
            arm()
            for _ in range(2):
                try:
                    await client.embeddings(MINILM, ["x"], provider=pin("alpha"), expected_width=384)
                except OpenRouterError as exc:
                    seen_errors.append(exc)
        emulator.control.set_limits(rpm=None)
        emulator.control.set_keys(accepted=["sk-or-v1-someone-else"])
        try:
            await client.embeddings(MINILM, ["x"])
        except OpenRouterError as exc:
            seen_errors.append(exc)
        texts = [
            repr(client),
            str(client),
            repr(provider),
            str(provider),
            repr(vars(client)),
            repr(provider.info),
        ]
        with pytest.raises(TypeError):
            pickle.dumps(client)
    assert len(seen_errors) >= 6
    for exc in seen_errors:
        texts += [str(exc), repr(exc), repr(vars(exc)), repr(exc.args)]
    texts += all_logs.lines
    assert any("HTTP Request" in line for line in all_logs.lines), "httpx logging was not captured"
    assert not [t for t in texts if CANARY in t]
    assert not [t for t in texts if CANARY[len("sk-or-v1-") :] in t]
    counters = emulator.control.counters()
    assert key_hash(CANARY) in counters["key_hashes"]
    assert CANARY not in repr(counters) and CANARY not in repr(emulator.control.state())


async def test_a_key_an_upstream_page_echoes_is_scrubbed_before_the_page_is_cut(emulator):
    """A proxy's error page in place of the JSON body is kept only up to its first 300
    characters; a key echoed across that cut must not leave its start behind."""
    async with OpenRouterClient(CANARY, base_url=emulator.base_url) as client:
        for starts in (270, 285, 299):  # where the key starts in the page
            echoed = f"Authorization: Bearer {CANARY}</body></html>"
            page = "<html><body>" + "x" * (starts - 12 - len("Authorization: Bearer ")) + echoed
            assert page.index(CANARY) == starts and starts + len(CANARY) > 300
            emulator.control.fail(status=502, page=page)
            with pytest.raises(OpenRouterError) as failed:
                await client.embeddings(MINILM, ["x"], provider=pin("alpha"), expected_width=384)
            said = " ".join([str(failed.value), repr(failed.value), repr(vars(failed.value))])
            assert "Authorization: Bearer " in said  # the page was read, up to the cut
            assert "sk-or-v1" not in said and CANARY[len("sk-or-v1-") :][:8] not in said, said
