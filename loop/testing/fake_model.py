"""``FakeModel``: a scripted model caller that emits real Anthropic stream event dicts.

Responses are rendered event by event the way the API streams them; every request is recorded
in ``model.requests``.

Details: docs/internals/loop-testing.md
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from loop.callers.errors import error_event
from loop.deps import Clock, ModelStreamItem
from loop.messages import JSONObject
from loop.request import ModelRequest


def text(value: str) -> JSONObject:
    return {"type": "text", "text": value}


def tool_use(
    name: str, tool_input: Mapping[str, Any], *, id: str | None = None, raw_json: str | None = None
) -> JSONObject:
    """A tool call; without ``id`` the model assigns ``toolu_fake_<request>_<block>``.

    ``raw_json`` streams that text as the input instead of ``tool_input`` (malformed JSON, a JSON
    array...), to test what happens when the model's input does not parse.
    """
    block: JSONObject = {"type": "tool_use", "name": name, "input": dict(tool_input)}
    if id is not None:
        block["id"] = id
    if raw_json is not None:
        block["raw_json"] = raw_json
    return block


def thinking(value: str, *, signature: str = "fake-signature") -> JSONObject:
    return {"type": "thinking", "thinking": value, "signature": signature}


def _pieces(value: str, size: int) -> list[str]:
    return [value[i : i + size] for i in range(0, len(value), size)] or [""]


@dataclass(frozen=True, slots=True)
class FakeResponse:
    blocks: tuple[JSONObject, ...] = ()
    stop_reason: str | None = None
    """``None``: ``tool_use`` if a block is a tool call, else ``end_turn``."""
    stop_sequence: str | None = None
    stop_details: JSONObject | None = None
    usage: Mapping[str, int] | None = None
    """``None``: 100 input tokens, output = characters / 4."""
    fail_after: int | None = None
    """Emit this many events, then an ``error`` event instead of the rest (no failure when the
    response has no more events than that)."""
    error_type: str = "overloaded_error"
    error_message: str = "Overloaded"
    http_status: int | None = None
    """The request fails with this HTTP status (no stream at all)."""
    chunk_chars: int = 8
    context_management: JSONObject | None = None
    """Sent on ``message_delta`` (what the upstream reports of its own context edits)."""

    @classmethod
    def of(cls, *blocks: JSONObject, stop_reason: str | None = None, **options: Any) -> FakeResponse:
        return cls(blocks=tuple(blocks), stop_reason=stop_reason, **options)

    @classmethod
    def http_error(cls, status: int, error_type: str, message: str = "fake error") -> FakeResponse:
        return cls(http_status=status, error_type=error_type, error_message=message)

    def failing_after(self, events: int) -> FakeResponse:
        return replace(self, fail_after=events)

    @property
    def resolved_stop_reason(self) -> str:
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if any(b.get("type") == "tool_use" for b in self.blocks) else "end_turn"

    def with_ids(self, request_number: int) -> tuple[JSONObject, ...]:
        return tuple(
            {**b, "id": f"toolu_fake_{request_number}_{i}"}
            if b.get("type") == "tool_use" and "id" not in b
            else b
            for i, b in enumerate(self.blocks)
        )

    def events(self, request_number: int = 1) -> list[JSONObject]:
        """The stream events of this response as the ``request_number``-th request."""
        if self.http_status is not None:
            return [error_event(self.error_type, self.error_message, self.http_status)]
        blocks = self.with_ids(request_number)
        usage = (
            dict(self.usage)
            if self.usage is not None
            else {"input_tokens": 100, "output_tokens": _output(blocks)}
        )
        events: list[JSONObject] = [
            {
                "type": "message_start",
                "message": {
                    "id": f"msg_fake_{request_number}",
                    "type": "message",
                    "role": "assistant",
                    "model": "fake-model",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {**usage, "output_tokens": 1},
                },
            }
        ]
        for index, block in enumerate(blocks):
            events.extend(self._block_events(index, block))
        delta: JSONObject = {"stop_reason": self.resolved_stop_reason, "stop_sequence": self.stop_sequence}
        if self.stop_details is not None:
            delta["stop_details"] = self.stop_details
        message_delta: JSONObject = {"type": "message_delta", "delta": delta, "usage": usage}
        if self.context_management is not None:
            message_delta["context_management"] = self.context_management
        events.append(message_delta)
        events.append({"type": "message_stop"})
        if self.fail_after is not None and self.fail_after < len(events):
            failure = {"type": "error", "error": {"type": self.error_type, "message": self.error_message}}
            events = [*events[: self.fail_after], failure]
        return events

    def _block_events(self, index: int, block: JSONObject) -> list[JSONObject]:
        kind = block.get("type")
        size = self.chunk_chars
        if kind == "text":
            start: JSONObject = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"], size)]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(block["thinking"], size)]
            if block.get("signature"):
                deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "tool_use":
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            raw = block.get("raw_json")
            payload = raw if isinstance(raw, str) else orjson.dumps(block["input"]).decode()
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(payload, size)]
        else:
            start, deltas = dict(block), []
        return [
            {"type": "content_block_start", "index": index, "content_block": start},
            *({"type": "content_block_delta", "index": index, "delta": d} for d in deltas),
            {"type": "content_block_stop", "index": index},
        ]


def _output(blocks: Iterable[JSONObject]) -> int:
    size = sum(len(orjson.dumps(b)) for b in blocks)
    return max(1, size // 4)


class FakeModelExhausted(AssertionError):
    """The loop made more requests than the script has responses."""


Script = FakeResponse | Callable[[ModelRequest], FakeResponse]


class FakeModel:
    """A ``ModelCaller`` answering each request with the next scripted response.

    A script entry may be a function of the request (to answer based on what was sent). With a
    ``clock`` and ``event_delay_s``, each event "takes" that long on the clock. ``then`` answers
    every request after the script's end (without it, one more request raises
    ``FakeModelExhausted``). Summarisation calls are requests too (``request.source ==
    "compact"``); ``calls(source)`` counts them apart.
    """

    def __init__(
        self,
        script: Iterable[Script],
        *,
        clock: Clock | None = None,
        event_delay_s: float = 0.0,
        then: Script | None = None,
    ) -> None:
        self._script = list(script)
        self._clock = clock
        self._event_delay_s = event_delay_s
        self._then = then
        self.requests: list[ModelRequest] = []

    def calls(self, source: str | None = None) -> int:
        """Requests made (with ``source``: only those from that source, e.g. ``"compact"``)."""
        return sum(1 for r in self.requests if source is None or r.source == source)

    @property
    def remaining(self) -> int:
        return len(self._script) - len(self.requests)

    async def __call__(self, request: ModelRequest) -> AsyncIterator[ModelStreamItem]:
        number = len(self.requests) + 1
        self.requests.append(request)
        entry = self._script[number - 1] if number <= len(self._script) else self._then
        if entry is None:
            raise FakeModelExhausted(f"request {number} but the script has {len(self._script)} responses")
        response = entry if isinstance(entry, FakeResponse) else entry(request)
        for event in response.events(number):
            if self._clock is not None and self._event_delay_s > 0:
                await self._clock.sleep(self._event_delay_s)
            yield event
