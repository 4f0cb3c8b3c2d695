"""Wire payloads used by the benchmark: the client's request body and the fake upstream's replies.

Everything here is computed once at start-up and reused as immutable ``bytes``, so neither the load
generator nor the fake upstream spends CPU on JSON during a run.
"""

from __future__ import annotations

from typing import Final

import orjson

from gateway.streaming.sse import PING_EVENT, encode_event

MODEL: Final = "claude-sonnet-4-5"
MESSAGE_ID: Final = "msg_bench0000000000000000001"
DEFAULT_DELTAS: Final = 50

# Token counts reported by the fake upstream (arbitrary but internally consistent).
INPUT_TOKENS: Final = 612
CACHE_CREATION_INPUT_TOKENS: Final = 0
CACHE_READ_INPUT_TOKENS: Final = 480
OUTPUT_TOKENS_NONSTREAM: Final = 12

_SYSTEM_PARAGRAPH = (
    "You are a careful, concise assistant working inside a software company's internal tooling. "
    "Answer questions about code, infrastructure and documentation. Prefer short, direct answers; "
    "quote file paths and commands exactly; never invent APIs that you have not seen in the context. "
    "When you are unsure, say so and describe how the user could find out. "
)


def system_prompt(target_bytes: int = 2048) -> str:
    """A realistic English system prompt of about ``target_bytes`` bytes."""
    parts: list[str] = []
    size = 0
    section = 1
    while size < target_bytes:
        chunk = f"Guideline {section}: {_SYSTEM_PARAGRAPH}"
        parts.append(chunk)
        size += len(chunk) + 1
        section += 1
    return "\n".join(parts)[:target_bytes]


def request_body(stream: bool, max_tokens: int = 1024) -> bytes:
    """A small, realistic Messages request: ~2 KB system prompt, one user turn."""
    body: dict[str, object] = {
        "model": MODEL,
        "max_tokens": max_tokens,
        "system": system_prompt(),
        "messages": [
            {
                "role": "user",
                "content": "In one paragraph, explain what an HTTP keep-alive connection is and "
                "why a reverse proxy should reuse upstream connections.",
            }
        ],
    }
    if stream:
        body["stream"] = True
    return orjson.dumps(body)


def _usage(output_tokens: int) -> dict[str, object]:
    return {
        "input_tokens": INPUT_TOKENS,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": CACHE_CREATION_INPUT_TOKENS,
        "cache_read_input_tokens": CACHE_READ_INPUT_TOKENS,
    }


def message_body() -> bytes:
    """The fixed non-streaming ``Message`` returned for every request."""
    return orjson.dumps(
        {
            "id": MESSAGE_ID,
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": [{"type": "text", "text": "A keep-alive connection is reused for many requests."}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": _usage(OUTPUT_TOKENS_NONSTREAM),
        }
    )


def stream_events(deltas: int = DEFAULT_DELTAS) -> list[bytes]:
    """The SSE events of one streamed reply, each fully framed (``event:`` + ``data:`` lines)."""
    events = [
        encode_event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": MESSAGE_ID,
                    "type": "message",
                    "role": "assistant",
                    "model": MODEL,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": _usage(1),
                },
            },
        ),
        PING_EVENT,
        encode_event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
    ]
    for i in range(deltas):
        events.append(
            encode_event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": f" tok{i}"},
                },
            )
        )
    events.append(encode_event("content_block_stop", {"type": "content_block_stop", "index": 0}))
    events.append(
        encode_event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": _usage(deltas),
            },
        )
    )
    events.append(encode_event("message_stop", {"type": "message_stop"}))
    return events


# Markers the load generator looks for in a streamed body.
FIRST_DELTA_MARKER: Final = b"event: content_block_delta"
STREAM_END_MARKER: Final = b"message_stop"
