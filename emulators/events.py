"""Rendering a turn as an Anthropic Message or as the list of Anthropic stream events.

The output is plain dicts, exactly as they appear in the ``data:`` of the real API's SSE (or in a
Bedrock ``chunk``): ``message_start``, ``content_block_start`` / ``_delta`` / ``_stop`` with
indices 0..n, ``message_delta`` with the stop reason and cumulative usage, ``message_stop``. A
mid-stream failure ends the list with an ``error`` event. ``ping`` is not included: it is a
first-party SSE detail the wire layer adds (:data:`PING_FRAME`). :func:`sse_frame` frames an event
the way the API does (providers.md section 1: an ``event:`` line and one ``data:`` line); the
emulator has its own encoder so it shares no code with the gateway it tests.
"""

from __future__ import annotations

import itertools
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import orjson

from .cache_model import CacheUsage
from .json_types import JSONObject
from .output import ModelOutput, output_tokens, tool_input_json

WORDS_PER_CHUNK = 3
JSON_CHUNK_CHARS = 16
_WORD_START = re.compile(r"\S+")


def new_message_id() -> str:
    return "msg_emu_" + secrets.token_hex(12)


def sse_frame(name: str, event: JSONObject) -> bytes:
    """``event: <name>\ndata: <json>\n\n``."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


PING_FRAME = b'event: ping\ndata: {"type": "ping"}\n\n'


@dataclass(frozen=True, slots=True)
class Turn:
    """Everything needed to render one response."""

    message_id: str
    model: str
    output: ModelOutput
    cache: CacheUsage

    @property
    def output_tokens(self) -> int:
        return output_tokens(self.output.content)


def cache_creation(cache: CacheUsage) -> JSONObject:
    return {
        "ephemeral_5m_input_tokens": cache.cache_creation_5m,
        "ephemeral_1h_input_tokens": cache.cache_creation_1h,
    }


def full_usage(cache: CacheUsage, output_tokens: int) -> JSONObject:
    """``usage`` of a non-streaming Message and of ``message_start`` (with its placeholder output)."""
    return {
        "input_tokens": cache.input_tokens,
        "cache_creation_input_tokens": cache.cache_creation_input_tokens,
        "cache_read_input_tokens": cache.cache_read_input_tokens,
        "cache_creation": cache_creation(cache),
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def delta_usage(cache: CacheUsage, output_tokens: int) -> JSONObject:
    """Cumulative ``message_delta.usage``."""
    return {
        "input_tokens": cache.input_tokens,
        "cache_creation_input_tokens": cache.cache_creation_input_tokens,
        "cache_read_input_tokens": cache.cache_read_input_tokens,
        "output_tokens": output_tokens,
    }


def render_message(turn: Turn) -> JSONObject:
    """The non-streaming ``Message`` JSON."""
    output = turn.output
    message: JSONObject = {
        "id": turn.message_id,
        "type": "message",
        "role": "assistant",
        "model": turn.model,
        "content": [dict(block) for block in output.content],
        "stop_reason": output.stop_reason,
        "stop_sequence": output.stop_sequence,
        "usage": full_usage(turn.cache, turn.output_tokens),
    }
    if output.stop_details is not None:
        message["stop_details"] = output.stop_details
    return message


def split_words(text: str, words: int = WORDS_PER_CHUNK) -> list[str]:
    """``text`` cut before every ``words``-th word; the pieces concatenate back to ``text``."""
    starts = [m.start() for m in _WORD_START.finditer(text)][words::words]
    bounds = [0, *starts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def split_fixed(text: str, size: int = JSON_CHUNK_CHARS) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _block_events(index: int, block: JSONObject) -> Iterator[JSONObject]:
    kind = block.get("type")
    if kind == "text":
        yield _start(index, {"type": "text", "text": ""})
        for piece in split_words(block["text"]):
            yield _delta(index, {"type": "text_delta", "text": piece})
    elif kind == "thinking":
        yield _start(index, {"type": "thinking", "thinking": "", "signature": ""})
        for piece in split_words(block["thinking"]):
            yield _delta(index, {"type": "thinking_delta", "thinking": piece})
        yield _delta(index, {"type": "signature_delta", "signature": block["signature"]})
    elif kind == "tool_use":
        yield _start(index, {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}})
        for piece in split_fixed(tool_input_json(block["input"])):
            yield _delta(index, {"type": "input_json_delta", "partial_json": piece})
    else:
        yield _start(index, dict(block))
    yield {"type": "content_block_stop", "index": index}


def _start(index: int, block: JSONObject) -> JSONObject:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _delta(index: int, delta: JSONObject) -> JSONObject:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def render_stream(turn: Turn) -> list[JSONObject]:
    """The stream events of ``turn``; ends with an ``error`` event if the turn fails mid-stream."""
    output = turn.output
    events: list[JSONObject] = [
        {
            "type": "message_start",
            "message": {
                "id": turn.message_id,
                "type": "message",
                "role": "assistant",
                "model": turn.model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": full_usage(turn.cache, 1),
            },
        }
    ]
    for index, block in enumerate(output.content):
        events.extend(_block_events(index, block))
    delta: JSONObject = {"stop_reason": output.stop_reason, "stop_sequence": output.stop_sequence}
    if output.stop_details is not None:
        delta["stop_details"] = output.stop_details
    events.append(
        {"type": "message_delta", "delta": delta, "usage": delta_usage(turn.cache, turn.output_tokens)}
    )
    events.append({"type": "message_stop"})
    if output.stream_error is not None:
        cut = next((i + 1 for i, e in enumerate(events) if e["type"] == "content_block_delta"), 1)
        events = [*events[:cut], {"type": "error", "error": output.stream_error.error_object()}]
    return events
