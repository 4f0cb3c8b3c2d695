"""SSE pieces for test upstreams written as small aiohttp apps: the Anthropic wire shape of a
``message_start`` event (as the API's streaming docs show it), encoded."""

from __future__ import annotations

from gateway.streaming.sse import encode_event


def message_start(model: str, *, message_id: str = "msg_test", input_tokens: int = 5) -> bytes:
    """``event: message_start`` for an empty assistant message of ``model``."""
    message = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1},
    }
    return encode_event("message_start", {"type": "message_start", "message": message})
