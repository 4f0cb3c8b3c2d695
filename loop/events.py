"""What a run yields to its consumer (a closed set), and the status events model callers emit.

The set is closed and the order within a turn is part of the contract (documented in the design
document); a withheld response yields no ``AssistantMessage`` and its ``error`` events are held
back until every recovery failed.

Details: docs/internals/loop.md
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from loop.messages import JSONObject
from loop.transitions import Terminal, Transition
from loop.usage import TokenUsage

if TYPE_CHECKING:  # annotations only: loading loop.context here would close an import cycle
    from loop.context.kinds import Layer, Outcome


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
    model: str | None = None
    """``fallback``: the model the caller switched to (the loop keeps it for the rest of the run)."""


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


@dataclass(frozen=True, slots=True)
class ContextBoundary:
    """Old messages were dropped (snip): a UI removes them; ``tokens_freed`` fed this turn's
    auto-compact decision."""

    turn: int
    layer: Layer
    tokens_freed: int
    messages_removed: int
    detail: str


@dataclass(frozen=True, slots=True)
class Compaction:
    """A context layer rewrote the history (or tried to). Tokens are the loop's estimate of the
    context before and after (API-reported figures for ``server_applied``)."""

    turn: int
    layer: Layer
    tokens_before: int
    tokens_after: int
    outcome: Outcome
    detail: str = ""
    breaker_tripped: bool = False
    """This failure opened the auto-compact circuit breaker."""
    usage: TokenUsage | None = None
    """What the summarisation call was billed (auto/reactive compaction only)."""

    @property
    def tokens_freed(self) -> int:
        return max(0, self.tokens_before - self.tokens_after)


@dataclass(frozen=True, slots=True)
class Tombstone:
    """Drop what this turn streamed: the response failed mid-stream and is being retried (an
    overload, a model fallback). ``message`` is the partial assistant message as it stood;
    ``results`` answers each of its ``tool_use`` blocks (the result of a call that already ran,
    which the retried response reuses, or a synthetic error), so a transcript that kept the partial
    message still pairs. Neither is in the history the next request sends."""

    turn: int
    message: JSONObject
    results: JSONObject
    reason: str


class TaskState(enum.StrEnum):
    """A sub-agent's lifecycle: pending → running → completed | failed | killed."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    KILLED = "killed"

    @property
    def final(self) -> bool:
        return self in (TaskState.COMPLETED, TaskState.FAILED, TaskState.KILLED)


@dataclass(frozen=True, slots=True)
class TaskUpdate:
    """A sub-agent task changed state (``loop.subagents``). ``handle`` can ``kill()`` it; the
    final update carries the child's typed ``terminal``, its usage and its result text."""

    task_id: str
    agent: str
    description: str
    state: TaskState
    handle: TaskHandle
    terminal: Terminal | None = None
    usage: TokenUsage | None = None
    result: str = ""


class TaskHandle(Protocol):
    @property
    def task_id(self) -> str: ...

    def kill(self) -> bool:
        """Cancel this task alone; ``False`` when it had already finished."""
        ...


ToolEvent = ToolStarted | ToolFinished
ContextEvent = ContextBoundary | Compaction
LoopEvent = (
    StreamEvent
    | AssistantMessage
    | ToolStarted
    | ToolFinished
    | ToolResults
    | TransitionEvent
    | StatusEvent
    | ContextBoundary
    | Compaction
    | Tombstone
    | TaskUpdate
)
