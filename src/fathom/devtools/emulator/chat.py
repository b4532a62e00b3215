"""A deterministic scripted chat model: what the emulator answers on /chat/completions.

A script is a list of turns loaded through the control API. Each turn has `content` and/or
`tool_calls` ([{"name", "arguments"}]) and optionally `match` (a substring of the last user
message: such a turn is a rule, used whenever it matches and never consumed), `model` (only
for that model; default any) and `stream_error` ({"after_chunks", "code", "message"}: when the
request streams, the stream breaks after that many content chunks with OpenRouter's documented
mid-stream error event). Turns without `match` are consumed in order, per model. With no turn
left, the model echoes the last user message, so an unscripted test still gets an answer.

The scripted local server (`fathom.devtools.localserver`) plays the same scripts, and both
stream a turn the same way (`content_pieces`, `tool_call_fragments`).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Turn:
    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    match: str | None = None
    model: str | None = None
    finish_reason: str | None = None
    stream_error: dict[str, Any] | None = None

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> Turn:
        known = {
            k: raw[k]
            for k in ("content", "tool_calls", "match", "model", "finish_reason", "stream_error")
            if k in raw
        }
        unknown = set(raw) - set(known)
        if unknown:
            raise ValueError(f"unknown script fields {sorted(unknown)}")
        turn = cls(**known)
        for tc in turn.tool_calls:
            if "name" not in tc:
                raise ValueError("a scripted tool call needs a name")
        return turn


def last_user_text(messages: list[dict[str, Any]]) -> str:
    for msg in reversed(messages):
        if msg.get("role") == "user":
            content = msg.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):  # content parts
                return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


class ScriptedChat:
    def __init__(self) -> None:
        self.turns: list[Turn] = []
        self._ids = itertools.count(1)

    def load(self, raw_turns: list[dict[str, Any]], *, append: bool = False) -> int:
        parsed = [Turn.parse(t) for t in raw_turns]
        self.turns = (self.turns if append else []) + parsed
        return len(self.turns)

    def reset(self) -> None:
        self.turns = []

    def next_turn(self, model: str, messages: list[dict[str, Any]]) -> Turn:
        text = last_user_text(messages)
        for turn in self.turns:
            if turn.match is not None and turn.model in (None, model) and turn.match in text:
                return turn
        for i, turn in enumerate(self.turns):
            if turn.match is None and turn.model in (None, model):
                return self.turns.pop(i)
        return Turn(content=f"echo: {text}")

    def tool_call_objects(self, turn: Turn) -> list[dict[str, Any]]:
        out = []
        for tc in turn.tool_calls:
            args = tc.get("arguments", {})
            out.append(
                {
                    "id": tc.get("id") or f"call_{next(self._ids)}",
                    "type": "function",
                    "function": {
                        "name": tc["name"],
                        "arguments": args if isinstance(args, str) else json.dumps(args),
                    },
                }
            )
        return out


def content_pieces(content: str | None) -> list[str]:
    """A turn's content as a stream sends it: word by word, the spaces kept."""
    if not content:
        return []
    words = content.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]


def tool_call_fragments(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stream deltas of a turn's tool calls: each call in two pieces, its arguments split
    in the middle, as real streams deliver them (the client must join them by index)."""
    out = []
    for i, call in enumerate(calls):
        args = call["function"]["arguments"]
        half = len(args) // 2
        out.append(
            {
                "tool_calls": [
                    {
                        "index": i,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": call["function"]["name"], "arguments": args[:half]},
                    }
                ]
            }
        )
        out.append({"tool_calls": [{"index": i, "function": {"arguments": args[half:]}}]})
    return out
