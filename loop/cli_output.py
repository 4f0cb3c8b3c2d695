"""What ``switchyard agent`` prints: the text view (streamed text, tool calls, transitions,
compactions, tombstones, sub-agent task states, the terminal) and ``--json``'s one object per
event (``event_json``)."""

from __future__ import annotations

from typing import Any, TextIO

import orjson

from loop.events import (
    AssistantMessage,
    Compaction,
    ContextBoundary,
    LoopEvent,
    StatusEvent,
    StreamEvent,
    TaskUpdate,
    Tombstone,
    ToolFinished,
    ToolResults,
    ToolStarted,
    TransitionEvent,
)
from loop.transitions import Terminal, describe
from loop.usage import TokenUsage


class TextPrinter:
    def __init__(self, out: TextIO) -> None:
        self._out = out

    def event(self, event: LoopEvent) -> None:
        match event:
            case StreamEvent(
                event={"type": "content_block_delta", "delta": {"type": "text_delta", "text": str(t)}}
            ):
                self._write(t)
            case StreamEvent(event={"type": "content_block_stop"}):
                self._write("\n")
            case ToolStarted(name=name, tool_use_id=tool_use_id):
                self._write(f"  -> {name} ({tool_use_id})\n")
            case ToolFinished(name=name, result=result, duration_s=duration):
                status = "error" if result.get("is_error") else "ok"
                content = str(result.get("content", ""))
                self._write(f"  <- {name} {status} ({len(content)} chars, {duration:.2f}s)\n")
            case StatusEvent(kind=kind, message=message):
                self._write(f"  [{kind}] {message}\n")
            case TransitionEvent(transition=transition) if transition.reason != "next_turn":
                self._write(f"  [{transition.reason}]\n")
            case Compaction(layer=layer, outcome=outcome, tokens_before=before, tokens_after=after):
                self._write(f"  [{layer.value} {outcome.value}: {before} -> {after} tokens]\n")
            case Tombstone(reason=reason):
                self._write(f"  [dropped the partial response: {reason}]\n")
            case TaskUpdate(task_id=task_id, agent=agent, state=task_state):
                self._write(f"  [{agent} {task_id}: {task_state.value}]\n")
            case ContextBoundary(layer=layer, messages_removed=removed, tokens_freed=freed):
                self._write(f"  [{layer.value}: {removed} messages dropped, {freed} tokens freed]\n")

    def terminal(self, terminal: Terminal) -> None:
        details = {k: v for k, v in describe(terminal).items() if k != "reason"}
        suffix = f" {orjson.dumps(details).decode()}" if details else ""
        self._write(f"\n[{terminal.reason}]{suffix}\n")

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()


class JsonPrinter:
    def __init__(self, out: TextIO) -> None:
        self._out = out

    def event(self, event: LoopEvent) -> None:
        self._line(event_json(event))

    def terminal(self, terminal: Terminal) -> None:
        self._line({"type": "terminal", **describe(terminal)})

    def _line(self, payload: dict[str, Any]) -> None:
        self._out.write(orjson.dumps(payload, default=str).decode() + "\n")
        self._out.flush()


def event_json(event: LoopEvent) -> dict[str, Any]:
    """A loop event as one JSON object with a ``type`` naming the event."""
    match event:
        case StreamEvent(turn=turn, event=raw):
            return {"type": "stream_event", "turn": turn, "event": raw}
        case AssistantMessage(turn=turn, message=message, stop_reason=stop_reason, usage=usage):
            return {
                "type": "assistant",
                "turn": turn,
                "message": message,
                "stop_reason": stop_reason,
                "usage": usage_json(usage),
            }
        case ToolStarted(turn=turn, tool_use_id=tool_use_id, name=name, started_at=started_at):
            return {
                "type": "tool_started",
                "turn": turn,
                "tool_use_id": tool_use_id,
                "name": name,
                "at": started_at,
            }
        case ToolFinished(turn=turn, tool_use_id=tool_use_id, name=name, result=result, duration_s=duration):
            return {
                "type": "tool_finished",
                "turn": turn,
                "tool_use_id": tool_use_id,
                "name": name,
                "result": result,
                "duration_s": duration,
            }
        case ToolResults(turn=turn, message=message):
            return {"type": "tool_results", "turn": turn, "message": message}
        case TransitionEvent(turn=turn, transition=transition):
            return {"type": "transition", "turn": turn, **describe(transition)}
        case Compaction():
            return {
                "type": "compaction",
                "turn": event.turn,
                "layer": event.layer.value,
                "tokens_before": event.tokens_before,
                "tokens_after": event.tokens_after,
                "outcome": event.outcome.value,
                "detail": event.detail,
                "breaker_tripped": event.breaker_tripped,
                "usage": usage_json(event.usage) if event.usage is not None else None,
            }
        case ContextBoundary():
            return {
                "type": "context_boundary",
                "turn": event.turn,
                "layer": event.layer.value,
                "tokens_freed": event.tokens_freed,
                "messages_removed": event.messages_removed,
                "detail": event.detail,
            }
        case StatusEvent():
            return {
                "type": "status",
                "kind": event.kind,
                "message": event.message,
                "attempt": event.attempt,
                "delay_s": event.delay_s,
                "error_type": event.error_type,
                "status": event.status,
                "model": event.model,
            }
        case Tombstone():
            return {
                "type": "tombstone",
                "turn": event.turn,
                "message": event.message,
                "results": event.results,
                "reason": event.reason,
            }
        case TaskUpdate():
            return {
                "type": "task",
                "task_id": event.task_id,
                "agent": event.agent,
                "description": event.description,
                "state": event.state.value,
                "terminal": describe(event.terminal) if event.terminal is not None else None,
                "usage": usage_json(event.usage) if event.usage is not None else None,
                "result": event.result,
            }


def usage_json(usage: TokenUsage) -> dict[str, Any]:
    """The token counts and what they cost (``cost_usd``, priced per response: :mod:`loop.cost`)."""
    return {**usage.as_dict(), "cost_usd": round(usage.cost_usd, 9)}
