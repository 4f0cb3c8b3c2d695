"""``switchyard agent "task" --workspace DIR``: a headless agent with the built-in file tools.

The model is reached through the gateway's provider layer as the environment configures it
(``ANTHROPIC_*``, ``CLAUDE_CODE_USE_BEDROCK``...), or through any Anthropic-compatible URL with
``--base-url``/``--api-key`` (the official SDK). Prints the streamed text and the tool calls (or,
with ``--json``, one JSON object per event) and the terminal reason; exits 0 iff the run completed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any, TextIO

import orjson

from gateway.config import ConfigError
from loop.config import DEFAULT_MODEL, LoopConfig
from loop.deps import LoopDeps, ModelCaller
from loop.events import (
    AssistantMessage,
    Compaction,
    ContextBoundary,
    LoopEvent,
    StatusEvent,
    StreamEvent,
    ToolFinished,
    ToolResults,
    ToolStarted,
    TransitionEvent,
)
from loop.query import QueryParams, query
from loop.tools.builtin import builtin_tools
from loop.tools.permissions import PermissionMode, PermissionPolicy, PermissionRequest, PermissionVerdict
from loop.transitions import Completed, Terminal, describe

EXIT_COMPLETED = 0
EXIT_STOPPED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

SYSTEM_PROMPT = (
    "You are a careful software engineering agent working in the directory {root}. Use the tools to "
    "read, search and change files there; paths are relative to that directory. Read code before "
    "changing it, keep changes small, and finish with a short summary of what you did."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchyard agent", description="Run a headless agent on a task.")
    parser.add_argument("task", help="what the agent should do")
    parser.add_argument(
        "--workspace", required=True, type=Path, help="directory the file tools are confined to"
    )
    parser.add_argument(
        "--permission-mode",
        default=PermissionMode.ACCEPT_EDITS.value,
        choices=[m.value for m in PermissionMode],
        help="who may approve state-changing tool calls (default: acceptEdits)",
    )
    parser.add_argument("--max-turns", type=int, default=LoopConfig().max_turns, help="model calls at most")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--json", action="store_true", help="one JSON object per event on stdout")
    parser.add_argument("--base-url", help="an Anthropic-compatible URL, used through the official SDK")
    parser.add_argument("--api-key", help="API key for --base-url")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.base_url and not args.api_key:
        parser.error("--base-url needs --api-key")
    if args.max_turns < 1:
        parser.error("--max-turns must be >= 1")
    if not args.workspace.is_dir():
        parser.error(f"--workspace: not a directory: {args.workspace}")
    try:
        return asyncio.run(_run(args, sys.stdout))
    except ConfigError as exc:
        print(f"switchyard agent: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


async def _run(args: argparse.Namespace, out: TextIO) -> int:
    root = args.workspace.resolve()
    caller: ModelCaller | None = None
    if args.base_url:
        from loop.callers.sdk import SdkModelCaller

        caller = SdkModelCaller(args.base_url, args.api_key)
    params = QueryParams(
        messages=args.task,
        system=SYSTEM_PROMPT.format(root=root),
        tools=builtin_tools(root),
        config=LoopConfig(model=args.model, max_turns=args.max_turns, source="sdk"),
        deps=LoopDeps(call_model=caller),
        permissions=PermissionPolicy(mode=PermissionMode(args.permission_mode)),
        can_use_tool=_ask_on_terminal if sys.stdin.isatty() and not args.json else None,
    )
    printer = _JsonPrinter(out) if args.json else _TextPrinter(out)
    run = query(params)
    try:
        async with run:
            async for event in run:
                printer.event(event)
    finally:
        close = getattr(caller, "aclose", None)
        if close is not None:
            await close()
    printer.terminal(run.terminal)
    return EXIT_COMPLETED if isinstance(run.terminal, Completed) else EXIT_STOPPED


async def _ask_on_terminal(request: PermissionRequest) -> PermissionVerdict:
    shown = orjson.dumps(request.tool_input).decode()
    answer = await asyncio.to_thread(input, f"\nAllow {request.tool_name} {shown[:300]}? [y/N] ")
    allowed = answer.strip().lower() in ("y", "yes")
    return PermissionVerdict(allowed, "approved at the terminal" if allowed else "refused at the terminal")


class _TextPrinter:
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
            case ContextBoundary(layer=layer, messages_removed=removed, tokens_freed=freed):
                self._write(f"  [{layer.value}: {removed} messages dropped, {freed} tokens freed]\n")

    def terminal(self, terminal: Terminal) -> None:
        details = {k: v for k, v in describe(terminal).items() if k != "reason"}
        suffix = f" {orjson.dumps(details).decode()}" if details else ""
        self._write(f"\n[{terminal.reason}]{suffix}\n")

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()


class _JsonPrinter:
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
                "usage": usage.as_dict(),
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
                "usage": event.usage.as_dict() if event.usage is not None else None,
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
            }


if __name__ == "__main__":
    sys.exit(main())
