"""What the scripted model produced for one request, independent of any wire format."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from .errors import ApiError
from .json_types import JSONObject
from .tokens import text_tokens


@dataclass(frozen=True, slots=True)
class ModelOutput:
    """Complete assistant content blocks plus how the turn ended.

    ``stream_error`` (streaming only) is sent as an SSE ``error`` event after the first content
    delta, in place of the rest of the stream.
    """

    content: tuple[JSONObject, ...]
    stop_reason: str
    stop_sequence: str | None = None
    stop_details: JSONObject | None = None
    stream_error: ApiError | None = None

    def with_content(self, content: tuple[JSONObject, ...], **changes: Any) -> ModelOutput:
        return replace(self, content=content, **changes)


def tool_input_json(value: Any) -> str:
    """The JSON a tool call's input is streamed as (``input_json_delta`` chunks concatenate to it)."""
    return json.dumps(value, ensure_ascii=False)


def block_output_tokens(block: JSONObject) -> int:
    """Output tokens of one generated block: ``text_tokens`` of what was generated."""
    kind = block.get("type")
    if kind == "text":
        return text_tokens(block["text"])
    if kind == "thinking":
        return text_tokens(block["thinking"])
    if kind == "tool_use":
        return text_tokens(tool_input_json(block["input"]))
    return text_tokens(json.dumps(block, ensure_ascii=False))


def output_tokens(content: tuple[JSONObject, ...]) -> int:
    """Output tokens of a whole turn (at least 1, as the real API reports)."""
    return max(1, sum(block_output_tokens(b) for b in content))
