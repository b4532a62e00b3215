"""A scripted local inference server (dev/test tool only): what a GPU host's Ollama, vLLM,
llama.cpp server or TEI answers, played from a script, so that the local chat and rerank
backends are tested over real HTTP against a separate process with no model to download.

`create_app(config)` builds the ASGI app; `python -m fathom.devtools.localserver --port N
--model NAME` serves it on 127.0.0.1; `LocalServerControl` is a small sync client for its
/control API (the script, faults, a delay, counters and the requests it received). Never a
product default.
"""

from fathom.devtools.localserver.app import LocalServerConfig, create_app
from fathom.devtools.localserver.control import LocalServerControl

__all__ = ["create_app", "LocalServerConfig", "LocalServerControl"]
