"""Building the next state: pure functions from (state, decision, outcome, tool results).

``record_response`` books a response (turn count, usage, context size) before ``decide`` looks at
it; ``advance`` applies a continue transition; ``conclude`` and ``interrupt`` build the final
state of a run, whose history always satisfies the pairing invariant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import orjson

from loop.budget import nudge_message
from loop.context.state import Pending
from loop.fallback import retried, switched
from loop.messages import (
    INTERRUPTED_RESULT_TEXT,
    MISSING_RESULT_TEXT,
    NOT_EXECUTED_RESULT_TEXT,
    Block,
    Message,
    completed_content,
    normalize,
    tool_result_block,
    tool_results_message,
    tool_use_ids,
    user_message,
    without_tool_uses,
)
from loop.outcome import ToolUse, TurnOutcome
from loop.state import LoopState
from loop.stop_hooks import blocking_message
from loop.structured import retry_message
from loop.transitions import (
    CollapseDrain,
    Completed,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    ModelFallback,
    NextTurn,
    OverloadRetry,
    PauseTurnResume,
    ReactiveCompactRetry,
    Refusal,
    StopHookBlocking,
    StructuredOutputRetry,
    SubmitInterrupt,
    Terminal,
    ThinkingDowngrade,
    TokenBudgetContinuation,
    Transition,
)

CONTINUE_PROMPT = (
    "Output token limit hit. Resume directly where you stopped: no apology, no recap of what you "
    "were doing. Pick up mid-thought if that is where the cut happened, and break the remaining "
    "work into smaller pieces."
)


def record_response(state: LoopState, outcome: TurnOutcome) -> LoopState:
    """Book one response: it counts as a turn and its tokens were billed, whatever happens next.

    ``state.messages`` must be exactly what the request sent.
    """
    accepted = outcome.usage.context_tokens if outcome.error is None else 0
    context = state.context
    if accepted > context.largest_accepted_prompt:
        context = replace(context, largest_accepted_prompt=accepted)
    return replace(
        state,
        context=context,
        turn_count=state.turn_count + 1,
        usage=state.usage + outcome.usage,
        budget=state.budget.record(outcome.usage.output_tokens),
        context_tokens=outcome.usage.total if outcome.usage.total else state.context_tokens,
        context_message_count=len(state.messages) + 1 if outcome.usage.total else state.context_message_count,
    )


def advance(
    state: LoopState, transition: Transition, outcome: TurnOutcome, results: Sequence[Block] = ()
) -> LoopState:
    """The state for the next iteration. ``results`` are the tool results of a ``NextTurn``, in
    call order."""
    assistant = outcome.assistant_message()
    match transition:
        case NextTurn():
            signature, repeats = _repetition(state, outcome.tool_uses)
            state = replace(
                state,
                messages=(*state.messages, assistant, tool_results_message(results)),
                max_output_tokens_override=None,
                max_output_recovery_count=0,
                consecutive_error_turns=_error_streak(state, results),
                last_tool_signature=signature,
                repeated_tool_calls=repeats,
                context=state.context.clear_recovery(),
            )
        case PauseTurnResume():
            state = replace(state, messages=(*state.messages, assistant))
        case MaxOutputTokensEscalate(max_tokens=cap):
            state = replace(state, max_output_tokens_override=cap)
        case MaxOutputTokensRecovery(attempt=attempt):
            partial = without_tool_uses(outcome.content)
            kept: tuple[Message, ...] = ({"role": "assistant", "content": partial},) if partial else ()
            state = replace(
                state,
                messages=(*state.messages, *kept, user_message(CONTINUE_PROMPT)),
                max_output_recovery_count=attempt,
            )
        case CollapseDrain(error_kind=kind, learned_limit=limit):
            context = replace(
                state.context,
                pending=Pending.DRAIN,
                drained=state.context.drained | {kind},
                learned_limit=limit if limit is not None else state.context.learned_limit,
            )
            state = replace(state, context=context)
        case ReactiveCompactRetry(error_kind=kind, learned_limit=limit):
            context = replace(
                state.context,
                pending=Pending.REACTIVE,
                reactive_attempted=state.context.reactive_attempted | {kind},
                learned_limit=limit if limit is not None else state.context.learned_limit,
            )
            state = replace(state, context=context)
        case ThinkingDowngrade(max_tokens=cap, thinking_budget=budget):
            context = replace(
                state.context,
                thinking_downgraded=True,
                thinking_budget=budget,
                thinking_disabled=budget is None,
                max_tokens_cap=cap if cap is not None else state.context.max_tokens_cap,
            )
            state = replace(state, context=context)
        case StopHookBlocking(errors=errors):
            state = replace(
                state,
                messages=(*state.messages, assistant, blocking_message(errors)),
                stop_hook_active=True,
                stop_hook_blocks=state.stop_hook_blocks + 1,
            )
        case TokenBudgetContinuation():
            state = replace(
                state,
                messages=(*state.messages, assistant, nudge_message(transition)),
                budget=state.budget.continued(),
                stop_hook_blocks=0,
            )
        case StructuredOutputRetry(errors=errors):
            state = replace(state, messages=(*state.messages, assistant, retry_message(errors)))
        case OverloadRetry():
            state = retried(state, transition)
        case ModelFallback(to_model=model):
            state = switched(state, model)
        case SubmitInterrupt():
            pass  # built by ``submitted``: the turn's remains and the new message
    if state.consecutive_overloads and not isinstance(transition, OverloadRetry):
        state = replace(state, consecutive_overloads=0)
    return replace(state, transition=transition, transitions=(*state.transitions, transition))


def conclude(state: LoopState, terminal: Terminal, outcome: TurnOutcome) -> LoopState:
    """The final state after ``decide`` returned ``terminal`` for ``outcome``.

    A finished answer (completed, refusal) is appended; a response that broke mid-stream keeps its
    completed blocks, its calls answered as not executed; a response the loop gave up on
    (truncated, context exceeded, malformed) is not kept.
    """
    if isinstance(terminal, Completed | Refusal):
        return _append_turn(state, list(outcome.content), {}, MISSING_RESULT_TEXT)
    if outcome.error is not None or not outcome.complete:
        return _append_turn(state, completed_content(outcome.content), {}, NOT_EXECUTED_RESULT_TEXT)
    return state


def interrupt(state: LoopState, outcome: TurnOutcome, finished: Mapping[str, Block]) -> LoopState:
    """The final state of an aborted run: the streamed part of the current response is kept, with
    the results of calls that finished and an "interrupted" error result for every other call."""
    return _append_turn(state, completed_content(outcome.content), finished, INTERRUPTED_RESULT_TEXT)


def with_interruption(state: LoopState, text: str) -> LoopState:
    """A hard abort's history ends with the interruption message (``text``): a text block added to
    the final tool-results message, or a user message of its own."""
    messages = list(state.messages)
    last = messages[-1] if messages else None
    content = last.get("content") if last is not None else None
    if (
        last is not None
        and last.get("role") == "user"
        and isinstance(content, list)
        and content
        and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    ):
        messages[-1] = {**last, "content": [*content, {"type": "text", "text": text}]}
    else:
        messages.append(user_message(text))
    return replace(state, messages=tuple(messages))


def submitted(
    state: LoopState,
    outcome: TurnOutcome | None,
    finished: Mapping[str, Block],
    new_messages: Sequence[Message],
    transition: Transition,
) -> LoopState:
    """The state after a submit-interrupt: the stopped turn's remains (as for an abort, when
    ``outcome`` is given: the turn was not in the history yet), then the new messages, and no
    interruption message."""
    if outcome is not None:
        state = interrupt(state, outcome, finished)
    return replace(
        state,
        messages=(*state.messages, *new_messages),
        transition=transition,
        transitions=(*state.transitions, transition),
    )


def _append_turn(
    state: LoopState, content: list[Block], finished: Mapping[str, Block], missing_text: str
) -> LoopState:
    messages = list(state.messages)
    if content:
        assistant: Message = {"role": "assistant", "content": content}
        messages.append(assistant)
        results = [
            finished.get(i) or tool_result_block(i, missing_text, is_error=True)
            for i in tool_use_ids(assistant)
        ]
        if results:
            messages.append(tool_results_message(results))
    return replace(state, messages=tuple(normalize(messages, missing_result_text=missing_text)))


def _error_streak(state: LoopState, results: Sequence[Block]) -> int:
    all_failed = bool(results) and all(r.get("is_error") is True for r in results)
    return state.consecutive_error_turns + 1 if all_failed else 0


def tool_signature(tool_use: ToolUse) -> str:
    """Identity of a call for the repetition guard: the name and the canonical input."""
    payload = tool_use.input if tool_use.input is not None else {"$invalid": tool_use.input_error}
    return orjson.dumps([tool_use.name, payload], option=orjson.OPT_SORT_KEYS).decode()


def _repetition(state: LoopState, tool_uses: Sequence[ToolUse]) -> tuple[str | None, int]:
    signature, count = state.last_tool_signature, state.repeated_tool_calls
    for tool_use in tool_uses:
        current = tool_signature(tool_use)
        count = count + 1 if current == signature else 1
        signature = current
    return signature, count
