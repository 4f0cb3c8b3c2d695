"""Context size: the last API-reported usage plus a conservative estimate for newer messages.

Two rates, both chosen to err on the side of a larger context: what is *added* is estimated at 3
bytes per token (real tokenizers average about 4 on English and code, so this over-counts), what a
layer *frees* at 4 bytes per token (so the freed amount is not over-stated); after a rewrite the
context pass keeps at most the rewritten history re-estimated, so a big new result cut to an excerpt
does not keep counting at the difference of the two rates. An image counts at most
``IMAGE_TOKENS`` whatever the size of its base64 data (the API scales images down before counting
them). The system prompt and the tool definitions are part of the estimate whenever the API has not
reported a size yet (the start of a run, and after the history was rewritten).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import orjson

from loop.messages import JSONObject, Message
from loop.state import LoopState

BYTES_PER_TOKEN_ESTIMATE = 3
"""Real tokenizers average about 4 bytes per token on English and code; 3 over-counts on purpose."""
FREED_BYTES_PER_TOKEN = 4
"""Tokens a rewrite frees are counted at the typical rate: never more than it really freed."""
PER_MESSAGE_OVERHEAD = 4
IMAGE_TOKENS = 5_000
"""What one image is counted at, at most: the API scales an image down before counting it (about
1,600 tokens; under 5,000 with high-resolution vision), so its base64 bytes say nothing of its
cost (a 3 MB screenshot would otherwise count as a million tokens)."""
_IMAGE_BYTES = IMAGE_TOKENS * BYTES_PER_TOKEN_ESTIMATE
_IMAGE_MARK = b'"type":"image"'


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A rough upper estimate of the tokens ``messages`` occupy in a prompt."""
    if not messages:
        return 0
    size = _sized(orjson.dumps(list(messages)), messages)
    return -(-size // BYTES_PER_TOKEN_ESTIMATE) + PER_MESSAGE_OVERHEAD * len(messages)


def estimate_json_tokens(values: Iterable[JSONObject | str]) -> int:
    """Upper estimate for prompt parts other than messages (system blocks, tool definitions)."""
    size = sum(len(v.encode()) if isinstance(v, str) else len(orjson.dumps(v)) for v in values)
    return -(-size // BYTES_PER_TOKEN_ESTIMATE)


def message_bytes(messages: Iterable[Message]) -> int:
    """The serialised size of ``messages``, images counted as ``estimate_tokens`` counts them."""
    return sum(_sized(orjson.dumps(m), (m,)) for m in messages)


def discounted_image_bytes(messages: Sequence[Message]) -> int:
    """Base64 image bytes the estimate does not count (the images' data beyond ``IMAGE_TOKENS``):
    a request refused for its size in bytes says nothing about its size in tokens when it is
    more than nothing."""
    return sum(max(0, size - _IMAGE_BYTES) for size in _image_sizes(messages))


def _sized(dumped: bytes, messages: Sequence[Message]) -> int:
    """``len(dumped)`` less the base64 image data beyond what an image is counted at."""
    if _IMAGE_MARK not in dumped:
        return len(dumped)
    return len(dumped) - discounted_image_bytes(messages)


def _image_sizes(blocks: Iterable[object]) -> Iterable[int]:
    """The base64 data lengths of the images in messages or blocks (tool results' too)."""
    for block in blocks:
        if not isinstance(block, dict):
            continue
        content = block.get("content")
        if isinstance(content, list):
            yield from _image_sizes(content)
        source = block.get("source")
        if block.get("type") == "image" and isinstance(source, dict) and source.get("type") == "base64":
            data = source.get("data")
            if isinstance(data, str):
                yield len(data)


def freed_tokens(bytes_before: int, bytes_after: int) -> int:
    """Tokens freed by replacing ``bytes_before`` of history with ``bytes_after``."""
    return max(0, bytes_before - bytes_after) // FREED_BYTES_PER_TOKEN


def context_tokens(state: LoopState) -> int:
    """Tokens the next request's prompt will occupy: reported (or estimated at the last rewrite)
    for what the API has seen, estimated for what was appended since."""
    newer = state.messages[state.context_message_count :]
    return state.context_tokens + estimate_tokens(newer)
