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
from loop.context import ContextConfig, ContextSession
from loop.deps import Clock, LoopDeps, ModelCaller, SystemClock
from loop.events import (
    AssistantMessage,
    Compaction,
    ContextBoundary,
    LoopEvent,
    StatusEvent,
    StreamEvent,
    TaskState,
    TaskUpdate,
    Tombstone,
    ToolFinished,
    ToolResults,
    ToolStarted,
    TransitionEvent,
)
from loop.observer import RunObserver
from loop.query import QueryParams, query
from loop.request import ModelRequest
from loop.run import Run
from loop.state import LoopState
from loop.stop_hooks import StopHook, StopHookResult
from loop.subagents import AgentDefinition, SubagentConfig, SubagentPool
from loop.system_prompt import AgentPrompt
from loop.transitions import (
    AbortedStreaming,
    AbortedTools,
    BlockingLimit,
    CollapseDrain,
    Completed,
    Guardrail,
    GuardrailKind,
    GuardrailReport,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    MaxTurns,
    ModelError,
    ModelFallback,
    NextTurn,
    OverloadRetry,
    PauseTurnResume,
    PromptTooLong,
    ReactiveCompactRetry,
    Refusal,
    StopHookBlocking,
    StopHookPrevented,
    SubmitInterrupt,
    Terminal,
    ThinkingDowngrade,
    Transition,
)

__all__ = [
    "AbortedStreaming",
    "AbortedTools",
    "AgentDefinition",
    "AgentPrompt",
    "AssistantMessage",
    "BlockingLimit",
    "Clock",
    "CollapseDrain",
    "Compaction",
    "Completed",
    "ContextBoundary",
    "ContextConfig",
    "ContextSession",
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
    "ModelFallback",
    "ModelRequest",
    "NextTurn",
    "OverloadRetry",
    "PauseTurnResume",
    "PromptTooLong",
    "QueryParams",
    "ReactiveCompactRetry",
    "Refusal",
    "Run",
    "RunObserver",
    "StatusEvent",
    "StopHook",
    "StopHookBlocking",
    "StopHookPrevented",
    "StopHookResult",
    "StreamEvent",
    "SubagentConfig",
    "SubagentPool",
    "SubmitInterrupt",
    "SystemClock",
    "TaskState",
    "TaskUpdate",
    "Terminal",
    "ThinkingDowngrade",
    "Tombstone",
    "ToolFinished",
    "ToolResults",
    "ToolStarted",
    "Transition",
    "TransitionEvent",
    "query",
]
