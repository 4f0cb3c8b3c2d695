"""The ``[[input:NAME {...}]]`` scripting marker: the input the scripted model sends to a tool."""

from __future__ import annotations

from typing import Any

import pytest

from emulators import ApiError, EmulatorConfig
from emulators.scenarios import select_scenario, strip_markers
from emulators.scripted_model import respond
from emulators.validation import validate_body

TOOLS = [
    {
        "name": "read",
        "description": "r",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
    {
        "name": "sum",
        "description": "s",
        "input_schema": {"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]},
    },
]


def _call(prompt: str, messages: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "messages": messages or [{"role": "user", "content": prompt}],
        "tools": TOOLS,
    }
    request = validate_body(body, "messages", EmulatorConfig())
    output = respond(request, select_scenario(prompt))
    return [b for b in output.content if b["type"] == "tool_use"]


def test_the_marker_sets_the_input_of_the_named_tool_only() -> None:
    prompt = '[[scenario:agent]] [[tools:read,sum]] [[input:read {"path": "/srv/notes.txt"}]] go'
    (call,) = _call(prompt)
    assert (call["name"], call["input"]) == ("read", {"path": "/srv/notes.txt"})
    answered = [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "x"}]},
    ]
    (second,) = _call(prompt, answered)
    assert (second["name"], second["input"]) == ("sum", {"a": 1.0})  # from the schema


def test_the_last_marker_for_a_tool_wins_and_markers_are_not_echoed() -> None:
    prompt = '[[scenario:tool_use]] [[tool:sum]] [[input:sum {"a": 1}]] [[input:sum {"a": 2, "b": {"c": 3}}]]'
    (call,) = _call(prompt)
    assert call["input"] == {"a": 2, "b": {"c": 3}}
    assert strip_markers(prompt).split() == []


def test_an_input_that_is_not_json_is_a_400() -> None:
    with pytest.raises(ApiError) as info:
        _call("[[scenario:tool_use]] [[tool:read]] [[input:read {path: x}]]")
    assert info.value.status == 400
