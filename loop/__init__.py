"""switchyard's agent loop.

Public: the names in ``__all__`` (``query``, its parameters, events, terminals, the session,
tools) and the subpackages whose docstring says "Public" (``loop.callers``, ``loop.context``,
``loop.hooks``, ``loop.mcp``, ``loop.prompt``, ``loop.subagents``, ``loop.testing``,
``loop.tools``, ``loop.tools.builtin``). Every other module is internal: import from the package.

Details: docs/internals/loop.md
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
from loop.session import Session
from loop.state import LoopState
from loop.stop_hooks import StopHook, StopHookResult
from loop.structured import OutputSpec
from loop.subagents import AgentDefinition, SubagentConfig, SubagentPool
from loop.system_prompt import AgentPrompt
from loop.tools.base import ToolContext
from loop.tools.content import Image
from loop.tools.function import tool
from loop.transitions import (
    AbortedStreaming,
    AbortedTools,
    BlockingLimit,
    CollapseDrain,
    Completed,
    Guardrail,
    GuardrailKind,
    GuardrailReport,
    HookStopped,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    MaxTurns,
    ModelError,
    ModelFallback,
    NextTurn,
    OverloadRetry,
    PauseTurnResume,
    PermissionDenied,
    PromptTooLong,
    ReactiveCompactRetry,
    Refusal,
    StopHookBlocking,
    StopHookLimit,
    StopHookPrevented,
    StructuredOutputInvalid,
    StructuredOutputRetry,
    SubmitInterrupt,
    Terminal,
    ThinkingDowngrade,
    TokenBudgetContinuation,
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
    "HookStopped",
    "Image",
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
    "OutputSpec",
    "OverloadRetry",
    "PauseTurnResume",
    "PermissionDenied",
    "PromptTooLong",
    "QueryParams",
    "ReactiveCompactRetry",
    "Refusal",
    "Run",
    "RunObserver",
    "Session",
    "StatusEvent",
    "StopHook",
    "StopHookBlocking",
    "StopHookLimit",
    "StopHookPrevented",
    "StopHookResult",
    "StreamEvent",
    "StructuredOutputInvalid",
    "StructuredOutputRetry",
    "SubagentConfig",
    "SubagentPool",
    "SubmitInterrupt",
    "SystemClock",
    "TaskState",
    "TaskUpdate",
    "Terminal",
    "ThinkingDowngrade",
    "TokenBudgetContinuation",
    "Tombstone",
    "ToolContext",
    "ToolFinished",
    "ToolResults",
    "ToolStarted",
    "Transition",
    "TransitionEvent",
    "query",
    "tool",
]
