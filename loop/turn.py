"""The iteration in flight and how it is wound down: a hard abort (``aclose()`` or cancellation:
the interruption message; the usage the stream had reported, ``message_start``'s and any
``message_delta``'s, is still counted), a submit-interrupt (``Run.submit``: the new message, no interruption
message), and the events for what a step appended to the history."""

from __future__ import annotations

import enum
from collections.abc import AsyncGenerator
from dataclasses import dataclass, replace

from loop.advance import interrupt, submitted, with_interruption
from loop.events import AssistantMessage, LoopEvent, ToolResults, TransitionEvent
from loop.messages import INTERRUPTION_MESSAGE, INTERRUPTION_TOOLS_MESSAGE
from loop.outcome import TurnOutcome
from loop.run import Run
from loop.state import LoopState
from loop.stream import TurnAccumulator
from loop.tools.executor import StreamingToolExecutor
from loop.transitions import AbortedStreaming, AbortedTools, SubmitInterrupt, Terminal


class Phase(enum.Enum):
    STREAMING = "streaming"
    TOOLS = "tools"


@dataclass(slots=True)
class Turn:
    """The pieces of the iteration in flight (what an abort has to wind down)."""

    number: int
    accumulator: TurnAccumulator
    executor: StreamingToolExecutor
    phase: Phase = Phase.STREAMING
    outcome: TurnOutcome | None = None
    settled: bool = False
    """The state already holds this turn (an abort now has nothing left to wind down)."""
    recorded: bool = False
    """The state's usage already counts this turn's response (``record_response``)."""

    def partial(self, *, open_text: bool = False) -> TurnOutcome:
        """The response as far as it came (``open_text``: see ``TurnAccumulator.outcome``)."""
        if self.outcome is not None:
            return self.outcome
        return self.accumulator.outcome(open_text=open_text)


async def aborted(state: LoopState, turn: Turn | None) -> tuple[Terminal, LoopState]:
    """The terminal and final state of a run closed or cancelled now."""
    if turn is None:
        return AbortedStreaming(turn=state.turn_count), state
    await turn.executor.cancel()
    final: LoopState = state
    if not turn.recorded:  # cut mid-stream: what the stream reported so far was billed
        final = replace(final, usage=final.usage + turn.partial().usage)
    unfinished: tuple[str, ...] = ()
    if not turn.settled:
        unfinished = turn.executor.unfinished_ids()
        final = interrupt(final, turn.partial(), turn.executor.finished_results())
    if turn.phase is Phase.TOOLS:
        final = with_interruption(final, INTERRUPTION_TOOLS_MESSAGE)
        return AbortedTools(turn=turn.number, interrupted_tool_use_ids=unfinished), final
    return AbortedStreaming(turn=turn.number), with_interruption(final, INTERRUPTION_MESSAGE)


async def submit_interrupt(
    run: Run, turn: Turn, state: LoopState
) -> AsyncGenerator[LoopEvent | LoopState, None]:
    """Stop ``turn`` for the messages submitted meanwhile: its events, then the new state."""
    await turn.executor.cancel()
    new = run.take_submitted()
    transition = SubmitInterrupt(turn.number)
    before = len(state.messages)
    outcome = turn.partial(open_text=True)  # what streamed is kept, a text block cut short too
    state = submitted(state, outcome, turn.executor.finished_results(), new, transition)
    turn.settled = True
    for message in state.messages[before : len(state.messages) - len(new)]:
        if message.get("role") == "assistant":
            if turn.phase is Phase.STREAMING:  # in the tools phase it was already yielded
                yield AssistantMessage(turn.number, message, outcome.stop_reason, outcome.usage)
        else:
            yield ToolResults(turn.number, message)
    yield TransitionEvent(turn.number, transition)
    yield state


def appended(number: int, state: LoopState, before: int, outcome: TurnOutcome) -> list[LoopEvent]:
    """Events for the messages the last step appended to the history."""
    events: list[LoopEvent] = []
    for message in state.messages[before:]:
        if message.get("role") == "assistant":
            events.append(AssistantMessage(number, message, outcome.stop_reason, outcome.usage))
        elif any(b.get("type") == "tool_result" for b in message.get("content") or [] if isinstance(b, dict)):
            events.append(ToolResults(number, message))
    return events
