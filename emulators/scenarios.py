"""Choosing what the scripted model does for one request.

A scenario is selected, in order of precedence, by

1. the request header ``x-emulator-scenario: NAME``;
2. a marker ``[[scenario:NAME]]`` anywhere in the text of the last user message that has text
   (messages holding only ``tool_result`` blocks are skipped, so the marker in the user's prompt
   stays in force across the tool round trip it starts);
3. the configured default (``text``).

Tool directives work the same way: ``x-emulator-tool: NAME`` / ``[[tool:NAME]]`` picks the tool of
``tool_use``; ``x-emulator-tools: a,b`` / ``[[tools:a,b]]`` gives the call order of ``agent``;
``[[input:NAME {"key": "value"}]]`` (one per tool, a JSON object without ``[``/``]``) is the input
the scripted model sends when it calls tool ``NAME``, instead of one built from the tool's schema
(a test then drives a real tool, e.g. an MCP server's, with arguments that make sense for it).
Markers are removed from the text the model echoes.

Scenario names: ``text``, ``tool_use``, ``agent``, ``thinking``, ``max_tokens``,
``stop_sequence``, ``pause_turn``, ``refusal``, ``model_context_window_exceeded``,
``stream_error`` and ``error:<status>`` (e.g. ``error:529``). An unknown name is a 400.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import invalid_request

SCENARIO_HEADER = "x-emulator-scenario"
TOOL_HEADER = "x-emulator-tool"
TOOLS_HEADER = "x-emulator-tools"

SCENARIOS: frozenset[str] = frozenset(
    {
        "text",
        "tool_use",
        "agent",
        "thinking",
        "max_tokens",
        "stop_sequence",
        "pause_turn",
        "refusal",
        "model_context_window_exceeded",
        "stream_error",
    }
)
ERROR_PREFIX = "error:"

_MARKER_RE = re.compile(r"\[\[(scenario|tools|tool|input):([^\[\]]*)\]\]")
_INPUT_RE = re.compile(r"\[\[input:\s*([^\s\[\]]+)\s+(\{[^\[\]]*\})\s*\]\]")


@dataclass(frozen=True, slots=True)
class Scenario:
    """The behaviour chosen for one request."""

    name: str
    error_status: int | None = None
    tool: str | None = None
    tools: tuple[str, ...] = ()
    explicit: bool = False
    """True when the request named the scenario (header or marker), false for the default."""
    inputs: tuple[tuple[str, str], ...] = ()
    """``(tool name, JSON object text)`` from ``[[input:NAME {...}]]`` markers."""

    def input_for(self, tool: str) -> str | None:
        """The scripted input (JSON text) for ``tool``, if the prompt gave one."""
        return next((raw for name, raw in reversed(self.inputs) if name == tool), None)


def parse_scenario_name(value: str) -> tuple[str, int | None]:
    """``"error:529"`` → ``("error", 529)``; ``"text"`` → ``("text", None)``; else 400."""
    name = value.strip()
    if name.startswith(ERROR_PREFIX):
        status_text = name[len(ERROR_PREFIX) :].strip()
        if status_text.isdigit() and 400 <= int(status_text) <= 599:
            return "error", int(status_text)
        raise invalid_request(f"Unknown emulator scenario {name!r}: error status must be 400-599")
    if name not in SCENARIOS:
        known = ", ".join(sorted(SCENARIOS)) + ", error:<status>"
        raise invalid_request(f"Unknown emulator scenario {name!r}; known scenarios: {known}")
    return name, None


def find_markers(text: str) -> dict[str, str]:
    """The last value of each marker kind present in ``text``."""
    return {m.group(1): m.group(2).strip() for m in _MARKER_RE.finditer(text)}


def strip_markers(text: str) -> str:
    """``text`` without any ``[[...]]`` emulator marker."""
    return _MARKER_RE.sub("", text)


def _split_names(value: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in value.split(",") if n.strip())


def select_scenario(
    prompt: str,
    *,
    default: str = "text",
    header_scenario: str | None = None,
    header_tool: str | None = None,
    header_tools: str | None = None,
) -> Scenario:
    """Resolve the scenario from headers, then markers in ``prompt``, then ``default``."""
    markers = find_markers(prompt)
    raw = header_scenario if header_scenario else markers.get("scenario")
    explicit = bool(raw)
    name, status = parse_scenario_name(raw if raw else default)
    tool = header_tool.strip() if header_tool and header_tool.strip() else markers.get("tool") or None
    tools = _split_names(header_tools) if header_tools else _split_names(markers.get("tools", ""))
    inputs = tuple((m.group(1), m.group(2)) for m in _INPUT_RE.finditer(prompt))
    return Scenario(name, status, tool, tools, explicit, inputs)
