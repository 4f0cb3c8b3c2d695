"""One pass of the context layers before a model call: the I/O half (the summarisation call and
the session's store and breaker) around the pure layers.

Order: 0 tool-result budget, 1 snip, 2 microcompact, 3 collapse (``LoopDeps.layers``), then 4
auto-compact (or reactive compaction, when a recovery transition asked for it). Each layer sees the
history and the token estimate the previous ones left, so what snip or collapse freed counts in the
auto-compact decision of the same pass. The pass then applies the thinking rules and the pairing
normaliser, and yields the events of the layers that acted and, last, a :class:`Prepared` with the
new state and the estimated size of the request (the blocking limit is checked on that).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass, replace

from loop.calls import guarded
from loop.config import LoopConfig
from loop.context import autocompact, collapse
from loop.context.kinds import Layer, Outcome
from loop.context.layers import ContextLayer
from loop.context.result import LayerResult
from loop.context.session import ContextSession
from loop.context.settings import ContextSettings, LayerState, Thresholds
from loop.context.thinking import has_thinking, strip_thinking
from loop.cost import Pricing
from loop.deps import Clock, ModelCaller
from loop.events import Compaction, ContextBoundary, LoopEvent, StatusEvent
from loop.fallback import current_model
from loop.messages import Message, normalize
from loop.request import summary_request
from loop.state import LoopState
from loop.tokens import context_tokens, estimate_tokens, freed_tokens, message_bytes
from loop.usage import TokenUsage


@dataclass(frozen=True, slots=True)
class Prepared:
    """The end of a pass: the state whose history the request will send, and its size."""

    state: LoopState
    tokens: int
    thresholds: Thresholds


@dataclass(frozen=True, slots=True)
class _Summary:
    text: str | None
    failure: str | None
    usage: TokenUsage


class ContextPipeline:
    """The run's context machinery (one per run; the session may be shared by runs)."""

    def __init__(
        self,
        settings: ContextSettings,
        config: LoopConfig,
        *,
        session: ContextSession,
        caller: ModelCaller,
        clock: Clock,
        uuid: Callable[[], str],
        layers: tuple[ContextLayer, ...],
        pricing: Pricing | None = None,
    ) -> None:
        """``pricing``: how summarisation calls are priced (``None``: the built-in first-party
        prices)."""
        self.settings = settings
        self._pricing = pricing or Pricing()
        self._unbooked = TokenUsage()
        """Summarisation usage not yet in a state the pass yielded (an abort now still counts it)."""
        self._config = config
        self._session = session
        self._caller = caller
        self._clock = clock
        self._uuid = uuid
        self._layers = layers

    def thinking_enabled(self, state: LoopState) -> bool:
        return self.settings.thinking and not state.context.thinking_disabled

    async def run(self, state: LoopState) -> AsyncGenerator[LoopEvent | Prepared, None]:
        settings, context = self.settings, state.context
        if context.learned_limit is not None:
            self._session.learn_limit(context.learned_limit)
        messages = state.messages
        view = LayerState(state.turn_count + 1, context_tokens(state), context.pending, context.learned_limit)
        usage = TokenUsage()
        rewritten = full_rewrite = False
        compactions, calls = context.compactions, context.summariser_calls
        if settings.config.enabled:
            for layer in self._layers:
                result = layer(messages, view, settings)
                self._keep(result)
                event = result.event
                if result.messages is not messages:
                    before = view.tokens
                    messages, rewritten = result.messages, True
                    view = view.with_tokens(self._after_rewrite(before - result.tokens_freed, messages))
                    event = _restamped(event, before, view.tokens)
                if event is not None:
                    yield event
            planned = autocompact.plan(messages, view, settings, breaker_open=not self._breaker_allows())
            if isinstance(planned, autocompact.CompactPlan) and self._breaker_allows():
                calls += 1
                self._session.summariser_calls += 1
                summary = _Summary(None, "no answer", TokenUsage())
                async for item in self._summarise(planned, current_model(state, self._config)):
                    if isinstance(item, _Summary):
                        summary = item
                    else:
                        yield item
                usage = summary.usage
                self._unbooked = usage
                result = autocompact.complete(
                    planned,
                    summary.text,
                    view,
                    settings,
                    failure=summary.failure,
                    usage=summary.usage,
                    breaker_tripped=self._record(summary),
                )
            elif isinstance(planned, autocompact.CompactPlan):
                result = autocompact.complete(planned, None, view, settings, failure="circuit breaker open")
            else:
                result = planned
            if result.event is not None:
                yield result.event
            if result.messages is not messages:
                messages, rewritten, full_rewrite = result.messages, True, True
                compactions += 1
        if not self.thinking_enabled(state) and has_thinking(messages):
            stripped = strip_thinking(messages)
            freed = freed_tokens(message_bytes(messages), message_bytes(stripped))
            view = view.with_tokens(self._after_rewrite(view.tokens - freed, stripped))
            messages, rewritten = stripped, True
        normalized = tuple(normalize(messages))
        tokens = settings.overhead_tokens + estimate_tokens(normalized) if full_rewrite else view.tokens
        new_context = replace(
            context,
            pending=None,
            can_drain=settings.config.enabled
            and settings.config.collapse
            and collapse.has_span(normalized, settings),
            compactions=compactions,
            summariser_calls=calls,
        )
        new_state = replace(state, context=new_context, usage=state.usage + usage)
        if rewritten or normalized != messages:
            new_state = replace(
                new_state, messages=normalized, context_tokens=tokens, context_message_count=len(normalized)
            )
        self._unbooked = TokenUsage()
        yield Prepared(new_state, tokens, settings.thresholds(context.learned_limit))

    def take_unbooked(self) -> TokenUsage:
        """What a summarisation call of a pass that did not finish spent (the run was aborted
        during it, or before the pass yielded its state); then reset."""
        unbooked, self._unbooked = self._unbooked, TokenUsage()
        return unbooked

    def _after_rewrite(self, tokens: int, messages: tuple[Message, ...]) -> int:
        """The estimate after a rewrite: what was freed is counted at 4 bytes per token, but the
        newer messages were added at 3, so a big new tool result cut to an excerpt would still
        count most of its size; the whole history re-estimated bounds that."""
        return max(0, min(tokens, self.settings.overhead_tokens + estimate_tokens(messages)))

    def _keep(self, result: LayerResult) -> None:
        for item in result.stored:
            self._session.store.put(item)

    def _breaker_allows(self) -> bool:
        return self._session.breaker.allows(self._clock.now(), self.settings.config.breaker_cooldown_s)

    def _record(self, summary: _Summary) -> bool:
        breaker = self._session.breaker
        if summary.text is not None:
            breaker.record_success()
            return False
        return breaker.record_failure(self._clock.now(), self.settings.config.breaker_threshold)

    async def _summarise(
        self, plan: autocompact.CompactPlan, model: str
    ) -> AsyncGenerator[StatusEvent | _Summary, None]:
        """The summarisation call, on ``model``: the run's current one (its fallback model after a
        sticky switch, never the overloaded primary)."""
        request = summary_request(
            self._config,
            model=model,
            system=plan.system,
            messages=plan.messages,
            max_tokens=plan.max_tokens,
            request_id=self._uuid(),
        )
        accumulator = self._pricing.accumulator(request)
        try:
            async with aclosing(guarded(self._caller, request)) as stream:
                async for item in stream:
                    if isinstance(item, StatusEvent):
                        yield item
                        continue
                    accumulator.feed(item)
                    if item.get("type") == "error":
                        break
        except BaseException:  # aborted mid-stream: what the stream reported was billed
            self._unbooked = accumulator.outcome().usage
            raise
        outcome = accumulator.outcome()
        if outcome.error is not None:
            yield _Summary(None, f"{outcome.error.error_type}: {outcome.error.message}", outcome.usage)
            return
        text = "\n".join(str(b.get("text", "")) for b in outcome.content if b.get("type") == "text").strip()
        if not outcome.complete or not text:
            reason = "the summary stream ended early" if not outcome.complete else "the summary was empty"
            yield _Summary(None, reason, outcome.usage)
            return
        yield _Summary(text, None, outcome.usage)


def _restamped(
    event: ContextBoundary | Compaction | None, before: int, after: int
) -> ContextBoundary | Compaction | None:
    """A layer's event with the estimate the pass kept after it (see ``_after_rewrite``)."""
    if isinstance(event, Compaction):
        return replace(event, tokens_after=min(event.tokens_after, after))
    if isinstance(event, ContextBoundary):
        return replace(event, tokens_freed=max(event.tokens_freed, before - after))
    return event


def server_applied_event(turn: int, reported: int, cleared: int) -> Compaction:
    """The upstream's own clearing, reported after the response (microcompact, server variant)."""
    return Compaction(
        turn,
        Layer.MICROCOMPACT,
        reported + cleared,
        reported,
        Outcome.SERVER_APPLIED,
        f"the upstream cleared {cleared} prompt tokens of old tool results",
    )
