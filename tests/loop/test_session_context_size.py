"""A run that continues the previous run's history (one ``ContextSession``) counts its context
from the last size the upstream reported, not from a fresh estimate of the whole history (which
over-counts by about a third and could stop a long session at the blocking limit early)."""

from __future__ import annotations

import loop
from loop.context.layers import DEFAULT_LAYERS, ContextLayer
from loop.context.result import LayerResult
from loop.context.settings import ContextSettings, LayerState
from loop.messages import Message, user_message
from loop.testing import FakeModel, FakeResponse, VirtualClock, text
from loop.tokens import estimate_tokens
from tests.loop.support import run_to_end

REPORTED = {"input_tokens": 1_000, "cache_read_input_tokens": 30_000, "output_tokens": 50}
"""What the fake upstream says every prompt was: 31,050 tokens with the answer."""
HISTORY = [user_message("h" * 60_000), {"role": "assistant", "content": [text("ok")]}]
"""~20,000 tokens by the loop's estimate (3 bytes per token)."""


class Seen:
    """A pass-through layer in front of the default ones: the token figure each pass starts from."""

    def __init__(self) -> None:
        self.tokens: list[int] = []

    def layers(self) -> tuple[ContextLayer, ...]:
        def record(
            messages: tuple[Message, ...], state: LayerState, settings: ContextSettings
        ) -> LayerResult:
            self.tokens.append(state.tokens)
            return DEFAULT_LAYERS[0](messages, state, settings)

        return (record, *DEFAULT_LAYERS[1:])


def run_in(session: loop.ContextSession, messages: list[Message], seen: Seen) -> loop.Run:
    model = FakeModel([FakeResponse.of(text("done"), usage=REPORTED)])
    return loop.query(
        loop.QueryParams(
            messages,
            deps=loop.LoopDeps(call_model=model, clock=VirtualClock(), layers=seen.layers()),
            session=session,
        )
    )


async def test_the_next_run_starts_from_the_reported_size() -> None:
    session, seen = loop.ContextSession(), Seen()
    first = run_in(session, [*HISTORY, user_message("first question")], seen)
    await run_to_end(first)
    estimated_start = seen.tokens[0]
    assert estimated_start > estimate_tokens(HISTORY)  # the first run can only estimate
    follow_up = user_message("second question")
    second = run_in(session, [*first.messages, follow_up], seen)
    await run_to_end(second)
    assert seen.tokens[1] == 31_050 + estimate_tokens([follow_up])
    # another history (not a continuation): estimated again
    other = run_in(session, [user_message("x" * 3_000)], seen)
    await run_to_end(other)
    assert seen.tokens[2] < 31_050 and seen.tokens[2] > 1_000
    # an edited history is not a continuation either
    edited = [user_message("h" * 60_001), *first.messages[1:], follow_up]
    await run_to_end(run_in(session, edited, seen))
    assert seen.tokens[3] > estimate_tokens(HISTORY)
