"""What the emulator tests ask through the SDK: the model they name, and untyped access to an
answer's content blocks and an error's body."""

from __future__ import annotations

from typing import Any

import anthropic

MODEL = "claude-sonnet-4-6"
"""A current (non-deprecated) model with a 2048-token cache minimum."""


def block(message: Any, index: int) -> Any:
    """Content block ``index`` of an SDK message, untyped (tests assert its type themselves)."""
    return message.content[index]


def body_of(error: anthropic.APIStatusError) -> dict[str, Any]:
    """The decoded JSON body of an SDK status error."""
    assert isinstance(error.body, dict)
    return error.body
