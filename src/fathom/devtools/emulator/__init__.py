"""An OpenRouter-compatible emulator with real encoders behind it (dev/test tool only).

`create_app(config)` builds the ASGI app; `python -m fathom.devtools.emulator --port N`
serves it on 127.0.0.1; `EmulatorControl` is a small sync client for its /control API;
`tests/devtools/emulator_fixtures.py` runs it as a pytest fixture. Never a product default.
"""

from fathom.devtools.emulator.app import create_app
from fathom.devtools.emulator.control import EmulatorControl
from fathom.devtools.emulator.state import (
    DEFAULT_UPSTREAMS,
    E5_SMALL,
    MINILM,
    EmulatorConfig,
    EmulatorState,
    key_hash,
)

__all__ = [
    "create_app",
    "EmulatorControl",
    "EmulatorConfig",
    "EmulatorState",
    "DEFAULT_UPSTREAMS",
    "MINILM",
    "E5_SMALL",
    "key_hash",
]
