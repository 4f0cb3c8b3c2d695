"""A deterministic stand-in for Claude.

Given a validated request and its :class:`~.scenarios.Scenario`, :func:`respond` returns a
:class:`~.output.ModelOutput` (complete content blocks and a stop reason). The same request always
gives the same output; nothing here knows about HTTP, SSE or any provider's framing.

Scenario behaviour (select with ``x-emulator-scenario: NAME`` or ``[[scenario:NAME]]`` in the
user's prompt; see :mod:`.scenarios`):

``text`` (default)
    ``Echo: <prompt>`` (markers removed, whitespace collapsed, cut to 200 characters). When the
    last user message holds ``tool_result`` blocks, a summary of them instead. With a JSON-schema
    ``output_config.format`` (structured outputs), a JSON instance of the schema.
``tool_use``
    A short text then one ``tool_use`` block for the tool named by ``[[tool:NAME]]`` /
    ``x-emulator-tool``, else ``tool_choice``'s tool, else the first custom tool; its input is
    built from the tool's ``input_schema`` (required properties). After the tool result comes
    back, a text summary with ``end_turn``, so a tool round trip completes.
``agent``
    Calls the tools listed by ``[[tools:a,b]]`` / ``x-emulator-tools`` (default: the first custom
    tool) one per turn, in order, skipping tools that already have a ``tool_result`` since the
    user's prompt (a new prompt starts the list again); when every listed tool has one, a final
    text summary. Progress is read from the conversation the way a
    model reads its own history: the tools listed before the one that got the most recent
    ``tool_result`` are done, even when a client compacted their calls and results away (a
    summary or a digest in their place), so a compacted history still moves on.
``thinking``
    A thinking block (with signature) before the ``text`` behaviour. A thinking block is also
    produced in every scenario when the request has ``thinking: {"type": "enabled"}``.
``max_tokens``, ``stop_sequence``, ``pause_turn``, ``refusal``, ``model_context_window_exceeded``
    Text ending with that stop reason (``max_tokens`` really fills the budget, up to 4096 tokens;
    ``stop_sequence`` uses the request's first stop sequence, or ``"STOP"``).
``stream_error``
    Streaming: HTTP 200, then an ``error`` event (``overloaded_error``) after the first delta.
    Non-streaming: a 529.
``error:<status>``
    The real error type and message for that status (e.g. 529 ``overloaded_error``).

``tool_choice`` ``{"type": "tool"}`` / ``{"type": "any"}`` forces a tool call in ``text`` and
``thinking``; ``{"type": "none"}`` turns ``tool_use`` into text. A request without ``tools`` gets
the ``text`` behaviour in ``tool_use`` and ``agent`` too (a model offered no tool cannot call one;
a summarisation request quoting a transcript with those markers is answered with text).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import orjson

from .conversation import (
    ToolResult,
    answered_tool_names,
    last_answered_tool,
    last_tool_results,
    prompt_text,
    prompt_turn,
)
from .errors import ApiError, invalid_request
from .json_types import JSONObject, canonical_json
from .output import ModelOutput
from .scenarios import Scenario, strip_markers
from .schema_values import example_object, example_value
from .tokens import BYTES_PER_TOKEN
from .validation import ValidatedRequest

ECHO_LIMIT = 200
RESULT_LIMIT = 120
MAX_FILL_TOKENS = 4096
DEFAULT_STOP_SEQUENCE = "STOP"
_FILLER = "The emulator keeps writing deterministic filler text until the token budget runs out."


def snippet(text: str, limit: int) -> str:
    """``text`` with markers removed and whitespace collapsed, cut to ``limit`` characters."""
    flat = " ".join(strip_markers(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _text(text: str) -> JSONObject:
    return {"type": "text", "text": text}


def _digest(*parts: object) -> bytes:
    return hashlib.sha256(canonical_json(list(parts))).digest()


def thinking_block(model: str, prompt: str) -> JSONObject:
    """A thinking block whose signature is a deterministic function of model and thinking text."""
    thinking = (
        f"The user wrote: {snippet(prompt, 80) or '(nothing)'}. "
        "I should answer briefly and deterministically. Let me write the reply now."
    )
    signature = base64.b64encode(_digest("signature", model, thinking) * 4).decode()
    return {"type": "thinking", "thinking": thinking, "signature": signature}


def _custom_tools(body: JSONObject) -> list[JSONObject]:
    tools = body.get("tools") or []
    return [t for t in tools if t.get("type") in (None, "custom")]


def _find_tool(body: JSONObject, name: str) -> JSONObject:
    for tool in body.get("tools") or []:
        if tool.get("name") == name:
            if tool.get("type") not in (None, "custom"):
                raise invalid_request(f"emulator: tool {name!r} is a server tool and cannot be scripted")
            return dict(tool)
    raise invalid_request(f"emulator: tool {name!r} is not in `tools`")


def _first_tool(body: JSONObject, scenario_name: str) -> JSONObject:
    tools = _custom_tools(body)
    if not tools:
        raise invalid_request(
            f"emulator scenario {scenario_name!r} requires at least one custom tool in `tools`"
        )
    return tools[0]


def tool_call(body: JSONObject, tool: JSONObject, scripted: str | None = None) -> tuple[JSONObject, ...]:
    """A short preamble and a ``tool_use`` block with an input built from the tool's schema, or
    ``scripted`` (the JSON object of an ``[[input:NAME {...}]]`` marker)."""
    schema = tool.get("input_schema")
    tool_input = example_object(schema) if isinstance(schema, dict) else {}
    if scripted is not None:
        try:
            tool_input = orjson.loads(scripted)
        except orjson.JSONDecodeError:
            raise invalid_request(f"emulator: the [[input:{tool['name']} ...]] marker is not JSON") from None
    call_id = "toolu_emu_" + _digest("tool_use", body.get("messages"), tool["name"]).hex()[:24]
    return (
        _text(f"I'll use the {tool['name']} tool."),
        {"type": "tool_use", "id": call_id, "name": tool["name"], "input": tool_input},
    )


def summarise_results(results: list[ToolResult]) -> str:
    parts = []
    for result in results:
        name = result.tool_name or result.tool_use_id
        verb = "failed with" if result.is_error else "returned"
        parts.append(f"The {name} tool {verb}: {snippet(result.text, RESULT_LIMIT) or '(empty)'}")
    return " ".join(parts)


def _output_schema(body: JSONObject) -> dict[str, Any] | None:
    config = body.get("output_config")
    for fmt in (config.get("format") if isinstance(config, dict) else None, body.get("output_format")):
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict):
            schema: dict[str, Any] = fmt["schema"]
            return schema
    return None


def _answer_text(body: JSONObject, prompt: str, results: list[ToolResult]) -> str:
    if results:
        return summarise_results(results)
    schema = _output_schema(body)
    if schema is not None:
        return orjson.dumps(example_value(schema)).decode()
    return f"Echo: {snippet(prompt, ECHO_LIMIT)}" if prompt.strip() else "Hello from the Switchyard emulator."


def _fill_text(prompt: str, max_tokens: int) -> str:
    target = min(max_tokens + 1, MAX_FILL_TOKENS) * BYTES_PER_TOKEN
    text = f"Echo: {snippet(prompt, ECHO_LIMIT)}"
    while len(text.encode("utf-8")) < target:
        text += " " + _FILLER
    return text


def _forced_tool(body: JSONObject) -> JSONObject | None:
    choice = body.get("tool_choice")
    if not isinstance(choice, dict):
        return None
    if choice.get("type") == "tool":
        return _find_tool(body, str(choice["name"]))
    if choice.get("type") == "any":
        return _first_tool(body, "tool_choice any")
    return None


def _tool_choice_none(body: JSONObject) -> bool:
    choice = body.get("tool_choice")
    return isinstance(choice, dict) and choice.get("type") == "none"


def _thinking_requested(body: JSONObject) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") == "enabled"


def _agent_turn(body: JSONObject, scenario: Scenario, prompt: str, results: list[ToolResult]) -> ModelOutput:
    messages = body["messages"][prompt_turn(body["messages"])[0] :]  # the work since the prompt
    order = list(dict.fromkeys(scenario.tools)) or [_first_tool(body, "agent")["name"]]
    answered = answered_tool_names(messages)
    last = last_answered_tool(messages)
    start = order.index(last) + 1 if last in order else 0
    pending = [name for name in order[start:] if name not in answered]
    if pending:
        return ModelOutput(
            tool_call(body, _find_tool(body, pending[0]), scenario.input_for(pending[0])), "tool_use"
        )
    summary = summarise_results(results) if results else f"Echo: {snippet(prompt, ECHO_LIMIT)}"
    return ModelOutput((_text(f"All tools finished ({', '.join(order)}). {summary}"),), "end_turn")


def _tool_use_turn(
    body: JSONObject, scenario: Scenario, prompt: str, results: list[ToolResult]
) -> ModelOutput:
    forced = _forced_tool(body)
    if _tool_choice_none(body) or (results and forced is None):
        return ModelOutput((_text(_answer_text(body, prompt, results)),), "end_turn")
    tool = _find_tool(body, scenario.tool) if scenario.tool else forced or _first_tool(body, "tool_use")
    return ModelOutput(tool_call(body, tool, scenario.input_for(tool["name"])), "tool_use")


def _scenario_turn(request: ValidatedRequest, scenario: Scenario, prompt: str) -> ModelOutput:
    body = request.body
    results = last_tool_results(body["messages"])
    name = scenario.name
    if name in ("tool_use", "agent") and not body.get("tools"):
        name = "text"  # a model offered no tool answers in text (e.g. asked to summarise a transcript)
    if name == "tool_use":
        return _tool_use_turn(body, scenario, prompt, results)
    if name == "agent":
        return _agent_turn(body, scenario, prompt, results)
    if name in ("text", "thinking"):
        forced = _forced_tool(body)
        if forced is not None:
            return ModelOutput(tool_call(body, forced, scenario.input_for(forced["name"])), "tool_use")
        return ModelOutput((_text(_answer_text(body, prompt, results)),), "end_turn")
    if name == "max_tokens":
        return ModelOutput((_text(_fill_text(prompt, body["max_tokens"])),), "max_tokens")
    if name == "stop_sequence":
        stops = [s for s in body.get("stop_sequences") or [] if s]
        sequence = stops[0] if stops else DEFAULT_STOP_SEQUENCE
        return ModelOutput((_text(f"Echo: {snippet(prompt, ECHO_LIMIT)}"),), "stop_sequence", sequence)
    if name == "pause_turn":
        return ModelOutput((_text("Working on it; this turn is paused and can be resumed."),), "pause_turn")
    if name == "refusal":
        details = {"type": "refusal", "category": None, "explanation": None}
        return ModelOutput((_text("I can't help with that."),), "refusal", stop_details=details)
    if name == "model_context_window_exceeded":
        text = f"Echo: {snippet(prompt, ECHO_LIMIT // 2)}"
        return ModelOutput((_text(text),), "model_context_window_exceeded")
    if name == "stream_error":
        if not request.stream:
            raise ApiError(529)
        text = f"Echo: {snippet(prompt, ECHO_LIMIT)}"
        return ModelOutput((_text(text),), "end_turn", stream_error=ApiError(529))
    raise AssertionError(f"unhandled scenario {name!r}")  # pragma: no cover - names are validated


def respond(request: ValidatedRequest, scenario: Scenario) -> ModelOutput:
    """The scripted turn for ``request`` (before stop sequences and ``max_tokens`` are applied).

    Raises :class:`ApiError` for ``error:<status>`` scenarios and for impossible requests (e.g.
    ``tool_use`` with no tools).
    """
    if scenario.name == "error":
        assert scenario.error_status is not None
        raise ApiError(scenario.error_status)
    prompt = prompt_text(request.body["messages"])
    output = _scenario_turn(request, scenario, prompt)
    if scenario.name == "thinking" or _thinking_requested(request.body):
        output = output.with_content((thinking_block(request.model.id, prompt), *output.content))
    return output
