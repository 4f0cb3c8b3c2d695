"""Re-emitting a complete Message (a non-streaming answer) as a well-formed SSE sequence.

Used by the non-streaming fallback: the client asked for a stream, the stream failed before any
content was forwarded, the gateway fetched the whole message instead and now plays it back as the
events a stream would have carried: ``message_start``, each content block with its deltas,
``message_delta`` with the stop reason and usage, ``message_stop``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from gateway.streaming.sse import PING_EVENT, encode_event

TEXT_CHUNK = 256  # characters per text/thinking delta


def _chunks(text: str) -> Iterator[str]:
    for start in range(0, len(text), TEXT_CHUNK):
        yield text[start : start + TEXT_CHUNK]


def _block_events(index: int, block: Mapping[str, Any]) -> Iterator[bytes]:
    kind = block.get("type")
    if kind == "text":
        start: dict[str, Any] = {"type": "text", "text": ""}
        if "citations" in block:
            start["citations"] = []
        yield _event("content_block_start", {"index": index, "content_block": start})
        for piece in _chunks(str(block.get("text", ""))):
            yield _delta(index, {"type": "text_delta", "text": piece})
        citations = block.get("citations")
        for citation in citations if isinstance(citations, list) else ():
            yield _delta(index, {"type": "citations_delta", "citation": citation})
    elif kind == "thinking":
        yield _event(
            "content_block_start",
            {"index": index, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        )
        for piece in _chunks(str(block.get("thinking", ""))):
            yield _delta(index, {"type": "thinking_delta", "thinking": piece})
        yield _delta(index, {"type": "signature_delta", "signature": block.get("signature", "")})
    elif kind in ("tool_use", "server_tool_use"):
        head = {k: v for k, v in block.items() if k != "input"}
        yield _event("content_block_start", {"index": index, "content_block": {**head, "input": {}}})
        yield _delta(
            index,
            {"type": "input_json_delta", "partial_json": orjson.dumps(block.get("input", {})).decode()},
        )
    else:  # redacted_thinking, server tool results...: complete in their start event
        yield _event("content_block_start", {"index": index, "content_block": dict(block)})
    yield _event("content_block_stop", {"index": index})


def decoded_message(body: bytes) -> dict[str, Any] | None:
    """The JSON object a non-streaming answer holds, or ``None`` (not JSON, or JSON of another
    kind: a list, a string, ``null``: no Message to play back)."""
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return message if isinstance(message, dict) else None


def message_to_sse(message: Mapping[str, Any]) -> Iterator[bytes]:
    """SSE frames equivalent to streaming ``message`` (a complete Messages API response). Fields
    of the wrong kind (an upstream's ``"usage": "..."``, ``"content": 5``) are left out, never a
    reason to fail half way."""
    reported = message.get("usage")
    usage = dict(reported) if isinstance(reported, dict) else {}
    output = usage.get("output_tokens")
    start_usage = {**usage, "output_tokens": min(output, 1) if type(output) is int else 0}
    shell = {k: v for k, v in message.items() if k not in ("content", "stop_reason", "stop_sequence")}
    shell.update({"content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage})
    yield _event("message_start", {"message": shell})
    yield PING_EVENT
    content = message.get("content")
    for index, block in enumerate(content if isinstance(content, list) else ()):
        if isinstance(block, dict):
            yield from _block_events(index, block)
    delta_usage = {k: v for k, v in usage.items() if k != "service_tier"}
    yield _event(
        "message_delta",
        {
            "delta": {
                "stop_reason": message.get("stop_reason"),
                "stop_sequence": message.get("stop_sequence"),
            },
            "usage": delta_usage,
        },
    )
    yield _event("message_stop", {})


def _delta(index: int, delta: dict[str, Any]) -> bytes:
    return _event("content_block_delta", {"index": index, "delta": delta})


def _event(name: str, fields: Mapping[str, Any]) -> bytes:
    return encode_event(name, {"type": name, **fields})
