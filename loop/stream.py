"""Accumulating one streamed response into complete content blocks.

Deltas are collected as lists of parts and joined once at ``content_block_stop``; a ``tool_use``
block's ``input_json_delta`` fragments are parsed as JSON once, at its stop: O(n) in the size of
the response, never a re-parse per delta. ``feed`` returns the ``ToolUse`` a stop event completes,
so the executor can start a concurrency-safe call while the rest of the response streams.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.streaming.usage import Usage
from loop.messages import JSONObject
from loop.outcome import ApiErrorInfo, ToolUse, TurnOutcome
from loop.usage import TokenUsage

_JSON_INPUT_TYPES = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})


@dataclass(slots=True)
class _OpenBlock:
    start: JSONObject
    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    signature: list[str] = field(default_factory=list)
    json: list[str] = field(default_factory=list)
    citations: list[Any] = field(default_factory=list)

    def add(self, delta: JSONObject) -> None:
        kind = delta.get("type")
        if kind == "text_delta":
            self.text.append(str(delta.get("text", "")))
        elif kind == "input_json_delta":
            self.json.append(str(delta.get("partial_json", "")))
        elif kind == "thinking_delta":
            self.thinking.append(str(delta.get("thinking", "")))
        elif kind == "signature_delta":
            self.signature.append(str(delta.get("signature", "")))
        elif kind == "citations_delta":
            self.citations.append(delta.get("citation"))

    def close(self) -> tuple[JSONObject | None, str | None]:
        """The finished block (``None`` for unsigned thinking) and a JSON error, if any."""
        block = dict(self.start)
        kind = block.get("type")
        error: str | None = None
        if kind == "text":
            block["text"] = str(block.get("text") or "") + "".join(self.text)
            citations = [*(block.get("citations") or []), *self.citations]
            if citations:
                block["citations"] = citations
            else:
                block.pop("citations", None)
        elif kind == "thinking":
            block["thinking"] = str(block.get("thinking") or "") + "".join(self.thinking)
            block["signature"] = str(block.get("signature") or "") + "".join(self.signature)
            if not block["signature"]:
                return None, None
        elif kind in _JSON_INPUT_TYPES:
            block["input"], error = _parse_input("".join(self.json), block.get("input"))
        return block, error


def _parse_input(raw: str, initial: object) -> tuple[JSONObject, str | None]:
    if not raw.strip():
        return (dict(initial) if isinstance(initial, dict) else {}), None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return {}, f"the tool input is not valid JSON ({exc})"
    if not isinstance(value, dict):
        return {}, f"the tool input must be a JSON object, got {type(value).__name__}"
    return value, None


class TurnAccumulator:
    """Feed it a response's stream event dicts in order; ``outcome()`` at any point."""

    def __init__(self, price: Callable[[Usage], float] | None = None) -> None:
        """``price``: what a response's usage costs in USD (``loop.cost.Pricing.of``); ``None``:
        the outcome's usage is unpriced (``cost_usd`` 0)."""
        self._price = price
        self._open: dict[int, _OpenBlock] = {}
        self._done: dict[int, JSONObject] = {}
        self._tool_uses: list[ToolUse] = []
        self._usage = Usage()
        self._stop_reason: str | None = None
        self._stop_sequence: str | None = None
        self._stop_details: JSONObject | None = None
        self._error: ApiErrorInfo | None = None
        self._complete = False
        self._message_id: str | None = None
        self._cleared_edits = 0
        self._cache_deleted = 0

    def feed(self, event: JSONObject) -> ToolUse | None:
        kind = event.get("type")
        if kind == "content_block_delta":
            block = self._open.get(_index(event))
            delta = event.get("delta")
            if block is not None and isinstance(delta, dict):
                block.add(delta)
        elif kind == "content_block_start":
            start = event.get("content_block")
            if isinstance(start, dict):
                self._open[_index(event)] = _OpenBlock(dict(start))
        elif kind == "content_block_stop":
            return self._close(_index(event))
        elif kind == "message_start":
            message = event.get("message")
            if isinstance(message, dict):
                self._message_id = message.get("id")
                self._update_usage(message.get("usage"))
        elif kind == "message_delta":
            self._message_delta(event)
        elif kind == "message_stop":
            self._complete = True
        elif kind == "error":
            self._error = error_from_event(event)
        return None

    def _open_text(self) -> dict[int, JSONObject]:
        found: dict[int, JSONObject] = {}
        for index, open_block in self._open.items():
            if open_block.start.get("type") == "text":
                block, _ = open_block.close()
                if block is not None and str(block.get("text", "")).strip():
                    found[index] = block
        return found

    def _close(self, index: int) -> ToolUse | None:
        open_block = self._open.pop(index, None)
        if open_block is None:
            return None
        block, error = open_block.close()
        if block is None:
            return None
        self._done[index] = block
        if block.get("type") != "tool_use":
            return None
        tool_use = ToolUse(
            id=str(block.get("id", "")),
            name=str(block.get("name", "")),
            input=None if error else block["input"],
            input_error=error,
        )
        self._tool_uses.append(tool_use)
        return tool_use

    def _message_delta(self, event: JSONObject) -> None:
        delta = event.get("delta")
        if isinstance(delta, dict):
            if "stop_reason" in delta:
                self._stop_reason = delta["stop_reason"]
            if "stop_sequence" in delta:
                self._stop_sequence = delta["stop_sequence"]
            details = delta.get("stop_details")
            if isinstance(details, dict):
                self._stop_details = details
        self._update_usage(event.get("usage"))
        management = event.get("context_management")
        edits = management.get("applied_edits") if isinstance(management, dict) else None
        if isinstance(edits, list):
            self._cleared_edits = sum(
                e["cleared_input_tokens"]
                for e in edits
                if isinstance(e, dict) and isinstance(e.get("cleared_input_tokens"), int)
            )

    def _update_usage(self, reported: object) -> None:
        if isinstance(reported, dict):
            self._usage.update(reported)
            deleted = reported.get("cache_deleted_input_tokens")
            if isinstance(deleted, int):
                self._cache_deleted = deleted

    def outcome(self, *, open_text: bool = False) -> TurnOutcome:
        """The response so far. ``open_text``: with the text blocks still streaming, as far as
        they came (a cut text block is a valid one; a cut call or thinking block is not)."""
        blocks = dict(self._done)
        if open_text:
            blocks.update(self._open_text())
        return TurnOutcome(
            content=tuple(blocks[i] for i in sorted(blocks)),
            stop_reason=self._stop_reason,
            stop_sequence=self._stop_sequence,
            stop_details=self._stop_details,
            usage=TokenUsage.from_reported(
                self._usage, self._price(self._usage) if self._price is not None else 0.0
            ),
            tool_uses=tuple(self._tool_uses),
            error=self._error,
            complete=self._complete and self._error is None,
            message_id=self._message_id,
            context_cleared_tokens=self._cleared_edits or self._cache_deleted,
        )


def _index(event: JSONObject) -> int:
    index = event.get("index")
    return index if isinstance(index, int) else -1


def error_from_event(event: JSONObject) -> ApiErrorInfo:
    """An ``error`` stream event (the callers add ``status`` for HTTP-level errors)."""
    error = event.get("error")
    error = error if isinstance(error, dict) else {}
    status = event.get("status")
    return ApiErrorInfo(
        error_type=str(error.get("type") or "api_error"),
        message=str(error.get("message") or "unknown error"),
        status=status if isinstance(status, int) else None,
    )
