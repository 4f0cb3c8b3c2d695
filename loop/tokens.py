"""Context size: the last API-reported usage plus a conservative estimate for newer messages."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from loop.messages import Message
from loop.state import LoopState

BYTES_PER_TOKEN_ESTIMATE = 3
"""Real tokenizers average about 4 bytes per token on English and code; 3 over-counts on purpose."""
PER_MESSAGE_OVERHEAD = 4


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A rough upper estimate of the tokens ``messages`` occupy in a prompt."""
    if not messages:
        return 0
    size = len(orjson.dumps(list(messages)))
    return -(-size // BYTES_PER_TOKEN_ESTIMATE) + PER_MESSAGE_OVERHEAD * len(messages)


def context_tokens(state: LoopState) -> int:
    """Tokens the next request's messages will occupy: reported for what the API has seen,
    estimated for what was appended since."""
    newer = state.messages[state.context_message_count :]
    return state.context_tokens + estimate_tokens(newer)
