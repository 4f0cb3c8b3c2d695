"""What the loop does on an overload (:mod:`loop.fallback` decides): the ``Tombstone`` for the
dropped response, and the status event for the retry (after its backoff, on the run's clock) or
the switch to the fallback model."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from loop import fallback
from loop.config import LoopConfig
from loop.deps import Clock
from loop.events import StatusEvent, Tombstone
from loop.messages import Block, tool_result_block, tool_results_message
from loop.outcome import TurnOutcome
from loop.transitions import ModelFallback, OverloadRetry


def tombstone(number: int, outcome: TurnOutcome, ran: dict[str, Block], reason: str) -> Tombstone:
    """The dropped response and an answer for each of its calls (what ran, or a synthetic error)."""
    by_id = {block.get("tool_use_id"): block for block in ran.values()}
    results = [
        by_id.get(tool_use.id) or tool_result_block(tool_use.id, fallback.FALLBACK_RESULT_TEXT, is_error=True)
        for tool_use in outcome.tool_uses
    ]
    return Tombstone(number, outcome.assistant_message(), tool_results_message(results), reason)


async def overload_events(
    decision: OverloadRetry | ModelFallback, config: LoopConfig, clock: Clock
) -> AsyncGenerator[StatusEvent, None]:
    if isinstance(decision, ModelFallback):
        yield StatusEvent(
            "fallback",
            f"{decision.from_model} is overloaded: switching to {decision.to_model} for the rest of the run",
            error_type=fallback.OVERLOADED_ERROR,
            model=decision.to_model,
        )
        return
    delay = fallback.retry_delay(config, decision.overloads)
    yield StatusEvent(
        "retry",
        f"{decision.model} is overloaded: retrying in {delay:.2f}s (overload {decision.overloads})",
        attempt=decision.overloads,
        delay_s=delay,
        error_type=fallback.OVERLOADED_ERROR,
    )
    await clock.sleep(delay)
