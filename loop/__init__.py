"""switchyard's agent loop.

::

    import loop
    from loop.tools.builtin import builtin_tools

    run = loop.query(loop.QueryParams("Fix the failing test", tools=builtin_tools("."), system="..."))
    async for event in run:
        ...
    match run.terminal:
        case loop.Completed(): ...
        case loop.Guardrail(kind=kind, report=report): ...
"""

from loop.config import LoopConfig
from loop.deps import Clock, Compactor, LoopDeps, ModelCaller, SystemClock
from loop.events import (
    AssistantMessage,
    LoopEvent,
    StatusEvent,
    StreamEvent,
    ToolFinished,
    ToolResults,
    ToolStarted,
    TransitionEvent,
)
from loop.query import QueryParams, query
from loop.request import ModelRequest
from loop.run import Run
from loop.state import LoopState
from loop.transitions import (
    AbortedStreaming,
    AbortedTools,
    BlockingLimit,
    Completed,
    Guardrail,
    GuardrailKind,
    GuardrailReport,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    MaxTurns,
    ModelError,
    NextTurn,
    PauseTurnResume,
    PromptTooLong,
    Refusal,
    StopHookPrevented,
    Terminal,
    Transition,
)

__all__ = [
    "AbortedStreaming",
    "AbortedTools",
    "AssistantMessage",
    "BlockingLimit",
    "Clock",
    "Compactor",
    "Completed",
    "Guardrail",
    "GuardrailKind",
    "GuardrailReport",
    "LoopConfig",
    "LoopDeps",
    "LoopEvent",
    "LoopState",
    "MaxOutputTokensEscalate",
    "MaxOutputTokensRecovery",
    "MaxTurns",
    "ModelCaller",
    "ModelError",
    "ModelRequest",
    "NextTurn",
    "PauseTurnResume",
    "PromptTooLong",
    "QueryParams",
    "Refusal",
    "Run",
    "StatusEvent",
    "StopHookPrevented",
    "StreamEvent",
    "SystemClock",
    "Terminal",
    "ToolFinished",
    "ToolResults",
    "ToolStarted",
    "Transition",
    "TransitionEvent",
    "query",
]
