"""Agent-loop metrics (``loop_*``), exported on the gateway's naming scheme.

``LoopMetrics`` is a run observer (``loop.observer.RunObserver``): pass it in
``QueryParams.observers`` and it counts what the run yields (compactions, tokens freed, breaker
trips, recoveries, terminal reasons, context size, tool calls, sub-agents: README, "Metrics").
``prime()`` creates every label combination at zero; ``serving(metrics, host, port)`` serves them
on their own (``switchyard agent --metrics-port``). In the gateway's process, pass its registry so
one ``/metrics`` serves both: ``LoopMetrics(gateway_metrics.registry)``.

Label values come from the loop's code and from tool registries (which may include MCP tools):
each label admits a bounded number of distinct, well-formed values and counts the rest as
``other``. Never pass session, user or request ids.
"""

from __future__ import annotations

import contextlib
import typing
from collections.abc import AsyncIterator, Iterable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from gateway.metrics import BoundedLabel
from loop.context.kinds import Layer, Outcome
from loop.events import (
    AssistantMessage,
    Compaction,
    ContextBoundary,
    LoopEvent,
    TaskState,
    TaskUpdate,
    ToolFinished,
    TransitionEvent,
)
from loop.transitions import (
    CollapseDrain,
    Guardrail,
    GuardrailKind,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    MaxTurns,
    ModelFallback,
    OverloadRetry,
    ReactiveCompactRetry,
    Terminal,
    ThinkingDowngrade,
)

MAX_REASONS = 32
MAX_TOOLS = 128
CONTEXT_TOKEN_BUCKETS = (
    1_000,
    2_000,
    5_000,
    10_000,
    20_000,
    50_000,
    100_000,
    150_000,
    200_000,
    500_000,
    1_000_000,
)
AUTOCOMPACT_BREAKER = "autocompact"
BREAKERS = (AUTOCOMPACT_BREAKER, "max_turns", *(kind.value for kind in GuardrailKind))
COMPACTIONS: tuple[tuple[Layer, Outcome], ...] = (
    (Layer.TOOL_RESULT_BUDGET, Outcome.APPLIED),
    (Layer.SNIP, Outcome.APPLIED),
    (Layer.MICROCOMPACT, Outcome.APPLIED),
    (Layer.MICROCOMPACT, Outcome.SERVER_APPLIED),
    (Layer.COLLAPSE, Outcome.APPLIED),
    (Layer.AUTOCOMPACT, Outcome.APPLIED),
    (Layer.AUTOCOMPACT, Outcome.FAILED),
    (Layer.AUTOCOMPACT, Outcome.BREAKER_OPEN),
    (Layer.REACTIVE_COMPACT, Outcome.APPLIED),
    (Layer.REACTIVE_COMPACT, Outcome.TRUNCATED),
)
"""Every (layer, outcome) a run can report."""
RECOVERIES = (
    ReactiveCompactRetry,
    CollapseDrain,
    ThinkingDowngrade,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    OverloadRetry,
    ModelFallback,
)
SUBAGENT_OUTCOMES = tuple(state.value for state in TaskState if state.final)


class LoopMetrics:
    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        known_tools: Iterable[str] = (),
        max_tools: int = MAX_TOOLS,
    ) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.compactions = Counter(
            "loop_compactions_total",
            "Context-management passes, by layer (snip, microcompact, autocompact...) and outcome.",
            ["layer", "outcome"],
            registry=r,
        )
        self.tokens_freed = Counter(
            "loop_tokens_freed_total",
            "Context tokens the context layers freed (the loop's estimate), by layer.",
            ["layer"],
            registry=r,
        )
        self.breaker_trips = Counter(
            "loop_breaker_trips_total",
            "Safety stops: the auto-compact circuit breaker opening, max_turns and guardrails ending a run.",
            ["breaker"],
            registry=r,
        )
        self.recoveries = Counter(
            "loop_recoveries_total",
            "Recovery transitions (reactive compaction, collapse drain, thinking downgrade, output-cap recovery).",
            ["kind"],
            registry=r,
        )
        self.terminals = Counter(
            "loop_terminal_total",
            "Agent loops ended, by terminal reason (completed, max_turns, model_error...).",
            ["reason"],
            registry=r,
        )
        self.context_tokens = Histogram(
            "loop_context_tokens",
            "Prompt size of each answered model call, as the upstream reported it (input + cache read + cache write).",
            buckets=CONTEXT_TOKEN_BUCKETS,
            registry=r,
        )
        self.tool_calls = Counter(
            "loop_tool_calls_total",
            "Tool calls finished, by tool and outcome (ok, or error: failed, refused or invalid).",
            ["tool", "outcome"],
            registry=r,
        )
        self.subagents = Counter(
            "loop_subagents_total",
            "Sub-agents ended, by outcome (completed, failed, killed).",
            ["outcome"],
            registry=r,
        )
        layers = [layer.value for layer in Layer]
        self._layer = BoundedLabel(MAX_REASONS, layers)
        self._compaction_outcome = BoundedLabel(MAX_REASONS, [o.value for o in Outcome])
        self._breaker = BoundedLabel(MAX_REASONS, BREAKERS)
        self._recovery = BoundedLabel(MAX_REASONS, [kind.reason for kind in RECOVERIES])
        self._tool_outcome = BoundedLabel(MAX_REASONS)
        self._reason = BoundedLabel(MAX_REASONS, [t.reason for t in typing.get_args(Terminal)])
        self._tool = BoundedLabel(max_tools, known_tools)

    def prime(self) -> None:
        """Create every label combination the loop can report, at zero, so that a series exists
        before its first event and ``increase()`` over a window counts that event exactly."""
        for layer, outcome in COMPACTIONS:
            self.compactions.labels(layer.value, outcome.value)
            self.tokens_freed.labels(layer.value)
        for breaker in BREAKERS:
            self.breaker_trips.labels(breaker)
        for kind in RECOVERIES:
            self.recoveries.labels(kind.reason)
        for terminal in typing.get_args(Terminal):
            self.terminals.labels(terminal.reason)
        for ended in SUBAGENT_OUTCOMES:
            self.subagents.labels(ended)

    # -- the observer (loop.observer.RunObserver) -------------------------------------------------

    def on_event(self, event: LoopEvent) -> None:
        match event:
            case Compaction(layer=layer, outcome=outcome, breaker_tripped=tripped):
                self.compaction(layer.value, outcome.value, event.tokens_freed)
                if tripped:
                    self.breaker_trip(AUTOCOMPACT_BREAKER)
            case ContextBoundary(layer=layer, tokens_freed=freed):
                self.compaction(layer.value, Outcome.APPLIED.value, freed)
            case TransitionEvent(transition=transition) if isinstance(transition, RECOVERIES):
                self.recovery(transition.reason)
            case AssistantMessage(usage=usage) if usage.context_tokens > 0:
                self.context_tokens.observe(usage.context_tokens)
            case ToolFinished(name=name):
                self.tool_call(name, "error" if event.is_error else "ok")
            case TaskUpdate(state=task_state) if task_state.final:
                self.subagents.labels(task_state.value).inc()
            case _:
                pass

    def on_terminal(self, terminal: Terminal) -> None:
        self.terminal(terminal.reason)
        match terminal:
            case MaxTurns():
                self.breaker_trip(terminal.reason)
            case Guardrail(kind=kind):
                self.breaker_trip(kind.value)
            case _:
                pass

    # -- direct counting ------------------------------------------------------------------------

    def compaction(self, layer: str, outcome: str, tokens_freed: int = 0) -> None:
        label = self._layer(layer)
        self.compactions.labels(label, self._compaction_outcome(outcome)).inc()
        if tokens_freed > 0:
            self.tokens_freed.labels(label).inc(tokens_freed)

    def breaker_trip(self, breaker: str) -> None:
        self.breaker_trips.labels(self._breaker(breaker)).inc()

    def recovery(self, kind: str) -> None:
        self.recoveries.labels(self._recovery(kind)).inc()

    def terminal(self, reason: str) -> None:
        self.terminals.labels(self._reason(reason)).inc()

    def tool_call(self, tool: str, outcome: str) -> None:
        self.tool_calls.labels(self._tool(tool), self._tool_outcome(outcome)).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


@contextlib.asynccontextmanager
async def serving(metrics: LoopMetrics, host: str, port: int) -> AsyncIterator[int]:
    """``GET /metrics`` (the text exposition of ``metrics.registry``) on ``host:port`` while the
    block runs (``port`` 0 picks a free one); yields the bound port. A failed bind raises
    ``OSError``."""

    async def exposition(request: web.Request) -> web.Response:
        response = web.Response(body=metrics.exposition())
        response.headers["content-type"] = CONTENT_TYPE_LATEST
        return response

    app = web.Application()
    app.router.add_get("/metrics", exposition)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound: int = runner.addresses[0][1] if runner.addresses else port
        yield bound
    finally:
        await runner.cleanup()
