"""What one model call produced: the values ``decide`` reads (no I/O, no behaviour)."""

from __future__ import annotations

from dataclasses import dataclass, field

from loop.messages import JSONObject
from loop.usage import TokenUsage


@dataclass(frozen=True, slots=True)
class ApiErrorInfo:
    """An Anthropic error: ``error.type``, ``error.message`` and the HTTP status when there was one
    (``None`` for an ``error`` event inside a 200 stream)."""

    error_type: str
    message: str
    status: int | None = None


@dataclass(frozen=True, slots=True)
class ToolUse:
    """A complete ``tool_use`` block. ``input`` is ``None`` when its streamed JSON did not parse
    (``input_error`` says why); such a call is answered with an error result, never executed."""

    id: str
    name: str
    input: JSONObject | None
    input_error: str | None = None


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """One model response, or as much of it as arrived.

    ``content`` holds only blocks whose ``content_block_stop`` arrived (unsigned thinking is
    dropped); ``complete`` is true once ``message_stop`` arrived.
    """

    content: tuple[JSONObject, ...] = ()
    stop_reason: str | None = None
    stop_sequence: str | None = None
    stop_details: JSONObject | None = None
    usage: TokenUsage = field(default_factory=TokenUsage)
    tool_uses: tuple[ToolUse, ...] = ()
    error: ApiErrorInfo | None = None
    complete: bool = False
    message_id: str | None = None
    context_cleared_tokens: int = 0
    """Prompt tokens the upstream cleared itself (context-management beta): the sum of
    ``context_management.applied_edits[].cleared_input_tokens``, or the usage's
    ``cache_deleted_input_tokens`` when only that was reported."""

    def assistant_message(self) -> JSONObject:
        return {"role": "assistant", "content": list(self.content)}
