"""Claude Code requests for shaping tests: the 2.1.197 first-party captures, and turns shaped like
Claude Code 2.1.332's first-party requests (providers.md section 7, re-observed with a recording
server on 2026-12-01: the first-party beta set, ``context_management``, ``output_config`` on the
``role: "system"`` message, ``thinking.display``, ``defer_loading`` tools; turn 1 ends with that
system message carrying the message breakpoint, turn 2 sends it again as a string and the
breakpoint moves to the tool result).

The 2.1.332 turns are built from the 2.1.197 tool-session captures (015/016) so that prose sizes
and the system prompt stay capture-shaped; only the 2.1.332 differences are applied.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tests.support.claude_code_betas import CC332_FIRST_PARTY

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real-clients"
CC332_FIRST_PARTY_BETAS = ",".join(CC332_FIRST_PARTY)
FIRST_PARTY_REPLAYS = (  # every first-party model-turn capture of Claude Code 2.1.197
    "001_cc_text_quiet_turn1",
    "015_cc_tool_bash_turn1",
    "016_cc_tool_bash_turn2",
    "017_cc_tool_bash_turn3",
    "025_cc_firstparty_1h_turn1",
    "026_cc_firstparty_1h_turn2",
    "029_cc_tool_thinking_turn2",
    "074_cc_interactive_title_generation",
    "075_cc_interactive_turn1",
)
_NOT_SENT = frozenset(
    {"content-length", "connection", "accept-encoding", "host", "x-api-key", "authorization"}
)


def load(name: str) -> dict[str, Any]:
    fixture: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return fixture


def headers_of(fixture: dict[str, Any]) -> dict[str, str]:
    """The capture's headers a client sets itself (the HTTP stack adds host, length, key)."""
    return {name: value for name, value in fixture["headers"] if name.lower() not in _NOT_SENT}


def _system_message(turn: dict[str, Any]) -> dict[str, Any]:
    return next(m for m in turn["messages"] if m["role"] == "system")


def cc332_turns() -> list[tuple[dict[str, Any], dict[str, str]]]:
    """Two consecutive first-party turns as Claude Code 2.1.332 sends them: ``(body, headers)``."""
    turns = []
    for name in ("015_cc_tool_bash_turn1", "016_cc_tool_bash_turn2"):
        fixture = load(name)
        body = copy.deepcopy(fixture["body"])
        body["max_tokens"] = 128000
        body["thinking"] = {"type": "adaptive", "display": "omitted"}
        body["output_config"] = {"effort": "medium"}
        for index, tool in enumerate(body["tools"]):
            if index >= 8:
                tool["defer_loading"] = True
        system = _system_message(body)
        system["output_config"] = {"effort": "medium"}
        headers = headers_of(fixture)
        headers["anthropic-beta"] = CC332_FIRST_PARTY_BETAS
        headers["User-Agent"] = "claude-cli/2.1.332 (external, sdk-cli)"
        turns.append((body, headers))
    first, second = turns[0][0], turns[1][0]
    # turn 1: the prompt has no marker, the trailing system message carries it (as a block list)
    for block in first["messages"][0]["content"]:
        block.pop("cache_control", None)
    text = _system_message(first)["content"]
    _system_message(first)["content"] = [
        {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}
    ]
    # turn 2: the same system text as a plain string; the marker is on the tool result
    for block in second["messages"][0]["content"]:
        block.pop("cache_control", None)
    _system_message(second)["content"] = text
    return turns


def strip_markers(value: Any) -> Any:
    """``value`` without any ``cache_control`` (the breakpoint a client moves between turns)."""
    if isinstance(value, dict):
        return {k: strip_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_markers(v) for v in value]
    return value
