"""Sub-agent definitions in Claude Code's ``--agents`` JSON (and claude-agent-sdk's ``agents``).

Field names and shapes are those of Claude Code 2.1.332's agent definition schema; fields the loop
does not use are ignored with a warning, so an existing file loads as it is.

Details: docs/internals/loop-subagents.md
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from loop.subagents.definition import AgentDefinition
from loop.tools.base import Tool
from loop.tools.permissions import PermissionMode

log = logging.getLogger("switchyard.loop")

MODEL_ALIASES: Mapping[str, str] = {
    "opus": "claude-opus-5-5",
    "sonnet": "claude-sonnet-5-5",
    "haiku": "claude-haiku-5-5",
}
"""Claude Code 2.1.332's aliases, as it sends them to a first-party upstream (captured on the
wire, providers.md section 7); the gateway maps them for the clouds."""
INHERIT = "inherit"
READ = frozenset({"description", "prompt", "tools", "disallowedTools", "model", "maxTurns", "permissionMode"})


def load_agents(value: str, tools: Sequence[Tool[Any]]) -> list[AgentDefinition]:
    """Agents from ``value``: a JSON object, or the path of a file holding one (as Claude Code's
    ``--agents``). ``tools``: the run's tools, which agents choose from. ``ValueError`` says what
    is wrong, and where."""
    text = value.strip()
    if text.startswith("{"):
        source, raw = "", text.encode()
    else:
        source = value
        try:
            raw = Path(value).read_bytes()
        except OSError as exc:
            raise ValueError(f"cannot read agents file {value}: {exc.strerror or exc}") from exc
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{source or 'the agents'}: not valid JSON: {exc}") from exc
    return parse_agents(data, tools, source=source)


def parse_agents(data: Any, tools: Sequence[Tool[Any]], *, source: str = "") -> list[AgentDefinition]:
    """``source``: where ``data`` came from (a file name), for the error messages."""
    if not isinstance(data, dict) or not data:
        where = f"{source}: " if source else ""
        raise ValueError(f'{where}expected a non-empty object {{"<name>": {{"description", "prompt", ...}}}}')
    return [_agent(f"{source}: {name}" if source else name, name, spec, tools) for name, spec in data.items()]


def _agent(where: str, name: str, spec: Any, tools: Sequence[Tool[Any]]) -> AgentDefinition:
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: must be an object")
    ignored = sorted(set(spec) - READ)
    if ignored:
        log.warning("%s: %s not supported by switchyard's loop; ignored", where, ", ".join(ignored))
    description, prompt = _text(where, spec, "description"), _text(where, spec, "prompt")
    chosen = _tools(where, spec, tools)
    model = spec.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise ValueError(f"{where}: model must be a model id, an alias (opus, sonnet, haiku) or 'inherit'")
    turns = spec.get("maxTurns")
    if turns is not None and (not isinstance(turns, int) or isinstance(turns, bool) or turns < 1):
        raise ValueError(f"{where}: maxTurns must be a positive integer")
    mode = spec.get("permissionMode", PermissionMode.BUBBLE.value)
    modes = [m.value for m in PermissionMode]
    if mode not in modes:
        raise ValueError(f"{where}: permissionMode must be one of {', '.join(modes)}")
    try:
        return AgentDefinition(
            name,
            description,
            system=prompt,
            tools=chosen,
            model=None if model in (None, INHERIT) else MODEL_ALIASES.get(model, model),
            permission_mode=PermissionMode(mode),
            max_turns=turns,
        )
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc


def _text(where: str, spec: Mapping[str, Any], key: str) -> str:
    value = spec.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: {key} must be a non-empty string")
    return value


def _names(where: str, spec: Mapping[str, Any], key: str) -> list[str] | None:
    value = spec.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: {key} must be a list of tool names")
    return value


def _tools(where: str, spec: Mapping[str, Any], tools: Sequence[Tool[Any]]) -> list[Tool[Any]]:
    available = {tool.name: tool for tool in tools}
    wanted = _names(where, spec, "tools")
    if wanted is None:
        chosen = list(tools)
    else:
        unknown = [name for name in wanted if name not in available]
        if unknown:
            raise ValueError(
                f"{where}: no tool {', '.join(unknown)}; the run's tools: {', '.join(available) or '(none)'}"
            )
        chosen = [available[name] for name in dict.fromkeys(wanted)]
    removed = _names(where, spec, "disallowedTools") or []
    return [tool for tool in chosen if not any(_removes(rule, tool.name) for rule in removed)]


def _removes(rule: str, name: str) -> bool:
    """``disallowedTools`` entries: a tool's name; ``mcp__*`` (every MCP tool); ``mcp__<server>``
    or ``mcp__<server>__*`` (every tool of that server)."""
    if rule == name:
        return True
    if rule == "mcp__*":
        return name.startswith("mcp__")
    server = rule.removesuffix("__*")
    return (
        server.startswith("mcp__") and "__" not in server[len("mcp__") :] and name.startswith(f"{server}__")
    )
