"""Layer 4, auto-compact: one summarisation call replaces the history with a summary plus the
protected tail.

Pure: :func:`plan` builds the call, :func:`complete` the new history; the pipeline makes the call.
The protected tail is kept unchanged, a failed reactive compaction still shrinks the history, and
auto-compaction skips a head too small to free anything.

Details: docs/internals/loop-context.md
"""

from __future__ import annotations

from dataclasses import dataclass

from loop.context.history import SUMMARY_NOTE, protected_tail_start
from loop.context.kinds import Layer, Outcome
from loop.context.microcompact import min_free_tokens
from loop.context.result import LayerResult
from loop.context.settings import ContextSettings, LayerState
from loop.context.state import Pending
from loop.context.transcript import render
from loop.events import Compaction
from loop.messages import Block, Message, blocks_view
from loop.tokens import estimate_tokens
from loop.usage import TokenUsage

SUMMARY_SYSTEM = (
    "You write the working memory of a software agent whose conversation no longer fits its "
    "context window. The agent will continue from your summary alone, so keep every fact it needs."
)
SUMMARY_INSTRUCTION = (
    "Summarise the conversation above for the agent that will continue it. Include: the user's "
    "requests and constraints; what was done (files read or changed, commands run, results, with "
    "exact paths and names); decisions and why; errors and how they were resolved; the work still "
    "pending and the next step. Plain text, no preamble."
)
PROMPT_OVERHEAD_TOKENS = 300
"""The summarisation request's system prompt, instruction and framing (upper estimate)."""


@dataclass(frozen=True, slots=True)
class CompactPlan:
    layer: Layer
    original: tuple[Message, ...]
    head: tuple[Message, ...]
    tail: tuple[Message, ...]
    first: Message | None
    """The first user message, kept verbatim next to the summary."""
    system: str
    messages: tuple[Message, ...]
    """The summarisation request's messages (one user message)."""
    max_tokens: int
    tokens_before: int
    transcript_level: int
    omitted: int


def plan(
    messages: tuple[Message, ...], state: LayerState, settings: ContextSettings, *, breaker_open: bool
) -> CompactPlan | LayerResult:
    config = settings.config
    reactive = state.pending is Pending.REACTIVE
    layer = Layer.REACTIVE_COMPACT if reactive else Layer.AUTOCOMPACT
    thresholds = settings.thresholds(state.learned_limit)
    if not reactive and (not config.autocompact or state.tokens < thresholds.autocompact):
        return LayerResult(layer, messages)
    start = protected_tail_start(messages, config)
    head, tail = messages[:start], messages[start:]
    first, summarised = _split_first(head, config.keep_first_message_tokens)
    if not summarised:
        return LayerResult(layer, messages)
    if not reactive and estimate_tokens(summarised) < config.compact_max_tokens + min_free_tokens(state, settings):
        return LayerResult(layer, messages)  # the summary could be as long: nothing worth a cache break
    if breaker_open and not reactive:
        event = Compaction(
            state.turn, layer, state.tokens, state.tokens, Outcome.BREAKER_OPEN, "circuit breaker open"
        )
        return LayerResult(layer, messages, event=event)
    budget = thresholds.window - config.compact_max_tokens - PROMPT_OVERHEAD_TOKENS
    transcript = render(summarised, budget)
    request = (
        {
            "role": "user",
            "content": [
                {"type": "text", "text": f"<conversation>\n{transcript.text}\n</conversation>"},
                {"type": "text", "text": SUMMARY_INSTRUCTION},
            ],
        },
    )
    return CompactPlan(
        layer=layer,
        original=messages,
        head=summarised,
        tail=tail,
        first=first,
        system=SUMMARY_SYSTEM,
        messages=request,
        max_tokens=config.compact_max_tokens,
        tokens_before=state.tokens,
        transcript_level=transcript.level,
        omitted=transcript.omitted,
    )


def complete(
    compact: CompactPlan,
    summary: str | None,
    state: LayerState,
    settings: ContextSettings,
    *,
    failure: str | None = None,
    usage: TokenUsage | None = None,
    breaker_tripped: bool = False,
) -> LayerResult:
    """The history after the summarisation call answered ``summary`` (``None``: it failed)."""
    if summary is None and compact.layer is Layer.AUTOCOMPACT:
        event = Compaction(
            state.turn,
            compact.layer,
            compact.tokens_before,
            compact.tokens_before,
            Outcome.FAILED,
            failure or "the summarisation call failed",
            breaker_tripped,
            usage,
        )
        return LayerResult(compact.layer, compact.original, event=event, failure=failure)
    if summary is None:
        note = (
            f"{SUMMARY_NOTE}: not available.] The {len(compact.head)} oldest message(s) were removed "
            "because the conversation no longer fit; continue from what follows."
        )
        outcome = Outcome.TRUNCATED
        detail = f"no summary ({failure or 'circuit breaker open'}): dropped {len(compact.head)} message(s)"
    else:
        note = (
            f"{SUMMARY_NOTE}, written when the context was compacted; it replaces those messages.]\n{summary}"
        )
        outcome = Outcome.APPLIED
        detail = f"summarised {len(compact.head)} message(s)"
        if compact.omitted:
            detail += f" ({compact.omitted} too old to include)"
    messages = _assemble(compact, note)
    after = settings.overhead_tokens + estimate_tokens(messages)
    event = Compaction(
        state.turn, compact.layer, compact.tokens_before, after, outcome, detail, breaker_tripped, usage
    )
    freed = max(0, compact.tokens_before - after)
    return LayerResult(compact.layer, messages, freed, event, failure=None if summary else failure)


def _assemble(compact: CompactPlan, note: str) -> tuple[Message, ...]:
    blocks: list[Block] = []
    if compact.first is not None:
        blocks.extend(blocks_view(compact.first))
    blocks.append({"type": "text", "text": note})
    tail = compact.tail
    if tail and tail[0].get("role") == "user":
        blocks.extend(blocks_view(tail[0]))
        tail = tail[1:]
    return ({"role": "user", "content": blocks}, *tail)


def _split_first(head: tuple[Message, ...], limit: int) -> tuple[Message | None, tuple[Message, ...]]:
    """The first user message to keep verbatim (the task, without any earlier summary) and the
    messages to summarise."""
    if not head or head[0].get("role") != "user":
        return None, head
    blocks = blocks_view(head[0])
    if not blocks or any(b.get("type") == "tool_result" for b in blocks):
        return None, head
    cut = next(
        (i for i, b in enumerate(blocks) if str(b.get("text", "")).startswith(SUMMARY_NOTE)), len(blocks)
    )
    kept: Message = {"role": "user", "content": blocks[:cut]}
    if cut == 0 or estimate_tokens([kept]) > limit:
        return None, head
    rest: tuple[Message, ...] = ({"role": "user", "content": blocks[cut:]},) if cut < len(blocks) else ()
    return kept, (*rest, *head[1:])
