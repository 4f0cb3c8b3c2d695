"""Context size: the last API-reported usage plus a conservative estimate for newer messages.

Two rates, both chosen to err on the side of a larger context: what is *added* is estimated at 3
bytes per token (real tokenizers average about 4 on English and code, so this over-counts), what a
layer *frees* at 4 bytes per token (so the freed amount is not over-stated); after a rewrite the
context pass keeps at most the rewritten history re-estimated, so a big new result cut to an excerpt
does not keep counting at the difference of the two rates. The system prompt and
the tool definitions are part of the estimate whenever the API has not reported a size yet (the
start of a run, and after the history was rewritten).
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


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A rough upper estimate of the tokens ``messages`` occupy in a prompt."""
    if not messages:
        return 0
    size = len(orjson.dumps(list(messages)))
    return -(-size // BYTES_PER_TOKEN_ESTIMATE) + PER_MESSAGE_OVERHEAD * len(messages)


def estimate_json_tokens(values: Iterable[JSONObject | str]) -> int:
    """Upper estimate for prompt parts other than messages (system blocks, tool definitions)."""
    size = sum(len(v.encode()) if isinstance(v, str) else len(orjson.dumps(v)) for v in values)
    return -(-size // BYTES_PER_TOKEN_ESTIMATE)


def message_bytes(messages: Iterable[Message]) -> int:
    return sum(len(orjson.dumps(m)) for m in messages)


def freed_tokens(bytes_before: int, bytes_after: int) -> int:
    """Tokens freed by replacing ``bytes_before`` of history with ``bytes_after``."""
    return max(0, bytes_before - bytes_after) // FREED_BYTES_PER_TOKEN


def context_tokens(state: LoopState) -> int:
    """Tokens the next request's prompt will occupy: reported (or estimated at the last rewrite)
    for what the API has seen, estimated for what was appended since."""
    newer = state.messages[state.context_message_count :]
    return state.context_tokens + estimate_tokens(newer)
