"""The loop's immutable configuration, snapshotted once when a run starts and never re-read.

Defaults are the numbers of the design digest: an 8,000-token output cap escalated once to
64,000, three continuation recoveries, 20 model calls, five minutes of wall clock, three
consecutive tool-error turns, five identical tool calls in a row, ten concurrent safe tools. The
token guardrail counts billed tokens (uncached input, output and cache writes: 1,000,000 by
default); cache reads are capped separately, and not by default, so a long cached session is not
stopped for re-reading its own prefix. A cost cap in USD (``max_cost_usd``) is off by default. The context layers' settings are ``context``. The token
budget (seed-digest B) is off unless ``token_budget`` is set; stop hooks may block at most three
completions in a row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loop.context.config import ContextConfig, autocompact_threshold, blocking_limit

DEFAULT_MODEL = "claude-sonnet-4-6"


@dataclass(frozen=True, slots=True)
class LoopConfig:
    model: str = DEFAULT_MODEL
    max_tokens: int = 8_000
    """Output cap of a normal request."""
    escalated_max_tokens: int = 64_000
    """Cap of the one clean retry after a response hit ``max_tokens``."""
    max_output_recoveries: int = 3
    """"Continue where you stopped" attempts after the escalated retry was still truncated."""

    max_turns: int = 20
    """Safety net: model calls per run (every request counts, retries and continuations too).
    Summarisation calls are not counted here: the circuit breaker and the once-per-error rungs
    bound them (``state.context.summariser_calls``)."""
    max_total_tokens: int | None = 1_000_000
    """Billed tokens over the run: uncached input + cache writes + output (summarisation calls
    included). Cache reads do not count: see ``max_cache_read_tokens``."""
    max_cache_read_tokens: int | None = None
    """Cache-read tokens over the run (``None``: no cap)."""
    max_cost_usd: float | None = None
    """USD over the run (``None``: no cap): every response priced with ``LoopDeps.prices`` for the
    model it came from (:mod:`loop.cost`), summarisation, hook-judge and sub-agent calls included.
    Checked before each call, like the token guardrail."""
    max_wall_clock_s: float | None = 300.0
    """Seconds since the run started, on the injected clock."""
    max_consecutive_errors: int | None = 3
    """Turns in a row whose tool results were all errors."""
    max_repeated_tool_calls: int | None = 5
    """The same tool with identical input this many times in a row."""

    max_tool_concurrency: int = 10
    """Concurrency-safe tool calls running at once."""
    tool_timeout_s: float = 120.0
    """Per-call timeout for tools that do not declare their own."""

    context_window: int = 200_000
    blocking_buffer_tokens: int = 3_000
    """The request is refused (``blocking_limit``) this close to the effective window."""
    source: str = "sdk"
    """Who runs the loop (``repl``, ``sdk``, ``agent:<name>``, ``compact``...). ``compact`` is
    exempt from the blocking limit (the compaction agent must be able to run)."""

    context: ContextConfig = field(default_factory=ContextConfig)
    """The context layers (tool-result budget, snip, microcompact, collapse, auto-compact)."""

    thinking_budget_tokens: int | None = None
    """Extended thinking budget (``thinking: {"type": "enabled"}``); ``None`` disables it."""
    betas: tuple[str, ...] = ()
    stop_sequences: tuple[str, ...] = ()
    temperature: float | None = None
    prompt_caching: bool = True
    """Mark the system prompt and the newest message block as cache breakpoints."""
    stream_events: bool = True
    """Yield every raw stream event (``StreamEvent``) as well as the complete messages."""

    token_budget: int | None = None
    """Output tokens the run should spend (``--budget``; :mod:`loop.budget`): an ``end_turn`` below
    90% of it continues with a nudge, until the model's output per continuation dwindles.
    ``None``: no budget."""
    task_budget_upstream: bool | None = None
    """Also send the budget upstream as ``output_config.task_budget`` (beta
    ``task-budgets-2026-03-13``). ``None``: only when the caller's upstream is the first-party API."""
    subagent: bool = False
    """The run is a sub-agent's (:mod:`loop.subagents`, or a hook's agent judge): it never
    continues on the token budget (the budget is the top-level run's)."""
    max_stop_hook_blocks: int = 3
    """Completions in a row stop hooks may block before the run ends with ``stop_hook_limit``."""
    fallback_model: str | None = None
    """Sticky model fallback (:mod:`loop.fallback`): after ``fallback_after_overloads`` overloads
    in a row on the primary model, the run switches to this model for the rest of the run."""
    fallback_after_overloads: int = 3
    """Consecutive overloads (529 / ``overloaded_error``, before or during a stream) that switch to
    ``fallback_model``; the earlier ones retry the primary after ``overload_retry_delay_s``."""
    overload_retry_delay_s: float = 0.5
    """Wait before retrying an overloaded primary (doubled per overload in a row, at most 8 s)."""

    def __post_init__(self) -> None:
        positive = {
            "max_tokens": self.max_tokens,
            "escalated_max_tokens": self.escalated_max_tokens,
            "max_turns": self.max_turns,
            "max_tool_concurrency": self.max_tool_concurrency,
            "context_window": self.context_window,
            "max_stop_hook_blocks": self.max_stop_hook_blocks,
            "fallback_after_overloads": self.fallback_after_overloads,
        }
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"LoopConfig.{name} must be >= 1, got {value}")
        if self.effective_window < 1:
            raise ValueError(
                f"LoopConfig.context_window ({self.context_window}) leaves no room once "
                f"min(escalated_max_tokens, 20_000) is reserved for the output"
            )
        if self.max_output_recoveries < 0:
            raise ValueError("LoopConfig.max_output_recoveries must be >= 0")
        if self.overload_retry_delay_s < 0:
            raise ValueError("LoopConfig.overload_retry_delay_s must be >= 0")
        if self.tool_timeout_s <= 0:
            raise ValueError("LoopConfig.tool_timeout_s must be > 0")
        for name, limit in (
            ("max_total_tokens", self.max_total_tokens),
            ("max_cache_read_tokens", self.max_cache_read_tokens),
            ("max_cost_usd", self.max_cost_usd),
            ("max_wall_clock_s", self.max_wall_clock_s),
            ("max_consecutive_errors", self.max_consecutive_errors),
            ("max_repeated_tool_calls", self.max_repeated_tool_calls),
            ("token_budget", self.token_budget),
        ):
            if limit is not None and limit <= 0:
                raise ValueError(f"LoopConfig.{name} must be > 0 or None, got {limit}")
        if self.thinking_budget_tokens is not None:
            if self.thinking_budget_tokens < 1024:
                raise ValueError("LoopConfig.thinking_budget_tokens must be >= 1024")
            if self.thinking_budget_tokens >= self.max_tokens:
                raise ValueError("LoopConfig.thinking_budget_tokens must be < max_tokens")

    @property
    def effective_window(self) -> int:
        """``context_window - min(max output, 20_000)``: what the prompt may use."""
        return self.context_window - min(self.escalated_max_tokens, 20_000)

    @property
    def autocompact_threshold(self) -> int:
        """``effective - 13_000`` (never below half the effective window)."""
        return autocompact_threshold(self.effective_window, self.context.autocompact_buffer_tokens)

    @property
    def blocking_limit(self) -> int:
        """``effective - 3_000`` (never below 90% of the effective window)."""
        return blocking_limit(self.effective_window, self.blocking_buffer_tokens)
