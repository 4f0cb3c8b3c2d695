"""What a run yields to its consumer (a closed set), and the status events model callers emit.

Order within a turn: ``StreamEvent``s as the response arrives (interleaved with ``ToolStarted`` /
``ToolFinished`` of concurrency-safe calls that start before the response ends), then the
complete ``AssistantMessage``, then the remaining tool events and one ``ToolResults`` message, then
a ``TransitionEvent`` saying why the loop goes round again. A response the loop withholds (a
truncated one it retries with a higher cap) produces no ``AssistantMessage``: its
``TransitionEvent`` tells a UI to drop what it streamed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from loop.messages import JSONObject
from loop.transitions import Transition
from loop.usage import TokenUsage


@dataclass(frozen=True, slots=True)
class StatusEvent:
    """Something the model caller wants the consumer to know while it waits: a retry after an
    error, a model fallback, or plain information. Model callers may yield these between stream
    events; the loop passes them through unchanged."""

    kind: Literal["retry", "fallback", "idle_warning", "info"]
    message: str
    attempt: int | None = None
    delay_s: float | None = None
    error_type: str | None = None
    status: int | None = None


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One raw Anthropic stream event (``message_start``, ``content_block_delta``...)."""

    turn: int
    event: JSONObject


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    """A complete assistant turn as it is appended to the history."""

    turn: int
    message: JSONObject
    stop_reason: str | None
    usage: TokenUsage


@dataclass(frozen=True, slots=True)
class ToolStarted:
    turn: int
    tool_use_id: str
    name: str
    started_at: float


@dataclass(frozen=True, slots=True)
class ToolFinished:
    turn: int
    tool_use_id: str
    name: str
    result: JSONObject
    """The ``tool_result`` block."""
    duration_s: float

    @property
    def is_error(self) -> bool:
        return self.result.get("is_error") is True


@dataclass(frozen=True, slots=True)
class ToolResults:
    """The one user message answering every call of the turn, results first, in call order."""

    turn: int
    message: JSONObject


@dataclass(frozen=True, slots=True)
class TransitionEvent:
    turn: int
    transition: Transition


ToolEvent = ToolStarted | ToolFinished
LoopEvent = (
    StreamEvent | AssistantMessage | ToolStarted | ToolFinished | ToolResults | TransitionEvent | StatusEvent
)
