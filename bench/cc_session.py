"""A Claude Code session replayed from a captured request, turn after turn.

Built from one captured first-turn request of Claude Code 2.1.197 (``tests/fixtures/real-clients/``,
README sections 1.3-1.5): its headers, its system blocks (the ``x-anthropic-billing-header`` block
``system[0]``, then ``system[1]`` and ``system[2]`` with a breakpoint each), its tools, its first
user message and its mid-conversation ``role: "system"`` message, and its other body fields.

Every request is what Claude Code would send at that point of the session:

* ``system[0]`` carries a fresh ``cch=<5 hex>;`` value on every request, as first-party Claude Code
  recomputes it (README 1.4; the captured request, taken with a custom base URL, has none);
* the three breakpoints are ``system[1]``, ``system[2]`` and the last content block of the last user
  message: the message breakpoint moves to the newest block every turn and the block that held it
  loses its marker (README 1.5);
* assistant turns are echoed back as received (``text`` then ``tool_use``, keys in Claude Code's
  order), tool results are ``{"tool_use_id", "type": "tool_result", "content", "is_error"}``;
* ``anthropic-beta`` is the captured list, minus whatever a turn deliberately drops.

The benchmark drives the emulator's scripted model with request headers (``x-emulator-*``) rather
than prompt markers, so the captured bodies stay as they were.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

FIXTURES_DIR: Final = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "real-clients"
DEFAULT_FIXTURE: Final = FIXTURES_DIR / "015_cc_tool_bash_turn1.json"

BILLING_PREFIX: Final = "x-anthropic-billing-header:"
EPHEMERAL: Final = {"type": "ephemeral"}
SESSION_HEADER: Final = "X-Claude-Code-Session-Id"

# headers the HTTP client owns (or that carry the captured, redacted key)
_CLIENT_OWNED: Final = frozenset({"content-length", "host", "connection", "accept-encoding", "x-api-key"})
# top-level keys rebuilt per request; the rest of the captured body is sent as captured
_PER_REQUEST: Final = ("model", "messages", "system", "tools", "stream")


@dataclass(frozen=True, slots=True)
class CapturedRequest:
    """One captured request: headers in wire order and the JSON body."""

    headers: tuple[tuple[str, str], ...]
    body: dict[str, Any]

    @classmethod
    def load(cls, path: Path) -> CapturedRequest:
        data = json.loads(path.read_text(encoding="utf-8"))
        headers = tuple((str(k), str(v)) for k, v in data["headers"])
        body = data["body"]
        if not isinstance(body, dict):
            raise ValueError(f"{path}: body is not a JSON object")
        return cls(headers, body)

    def header(self, name: str) -> str | None:
        lowered = name.lower()
        return next((v for k, v in self.headers if k.lower() == lowered), None)


def cch_value(session_id: str, request_number: int) -> str:
    """A per-request 5-hex ``cch`` value (deterministic, different on every request)."""
    return hashlib.sha256(f"{session_id}:{request_number}".encode()).hexdigest()[:5]


def with_cch(billing_text: str, cch: str) -> str:
    """The billing header text with ``cch=<cch>;`` (replacing one, or appended as Claude Code does)."""
    parts = [p for p in billing_text.rstrip().split(";") if p.strip() and not p.strip().startswith("cch=")]
    return ";".join(parts) + f"; cch={cch};"


def _strip_markers(block: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def _content_blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [dict(b) for b in content or [] if isinstance(b, Mapping)]


def echo_block(block: Mapping[str, Any]) -> dict[str, Any]:
    """An assistant content block as Claude Code sends it back (its own key order, no extras)."""
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block.get("text", "")}
    if kind == "tool_use":
        return {"type": "tool_use", "id": block["id"], "name": block["name"], "input": block.get("input", {})}
    if kind == "thinking":
        return {
            "type": "thinking",
            "thinking": block.get("thinking", ""),
            "signature": block.get("signature", ""),
        }
    return {k: v for k, v in block.items() if v is not None}


def tool_result(tool_use_id: str, content: str) -> dict[str, Any]:
    """A tool_result block in Claude Code's key order."""
    return {"tool_use_id": tool_use_id, "type": "tool_result", "content": content, "is_error": False}


@dataclass
class ClaudeCodeSession:
    """The growing conversation of one Claude Code session, and its next request."""

    captured: CapturedRequest
    history: list[dict[str, Any]] = field(default_factory=list)  # messages without any breakpoint
    requests_sent: int = 0

    @classmethod
    def from_fixture(cls, path: Path = DEFAULT_FIXTURE) -> ClaudeCodeSession:
        captured = CapturedRequest.load(path)
        messages = captured.body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ValueError(f"{path}: no messages")
        history = [
            {**m, "content": [_strip_markers(b) for b in _content_blocks(m)]}
            if isinstance(m.get("content"), list)
            else dict(m)
            for m in messages
        ]
        system = captured.body.get("system")
        if (
            not isinstance(system, list)
            or not system
            or not str(system[0].get("text", "")).startswith(BILLING_PREFIX)
        ):
            raise ValueError(f"{path}: system[0] is not Claude Code's billing header block")
        return cls(captured, history)

    # --- what the capture fixes -------------------------------------------------------------

    @property
    def session_id(self) -> str:
        value = self.captured.header(SESSION_HEADER)
        if value is None:
            raise ValueError("the captured request has no X-Claude-Code-Session-Id header")
        return value

    @property
    def model(self) -> str:
        return str(self.captured.body["model"])

    @property
    def betas(self) -> list[str]:
        raw = self.captured.header("anthropic-beta") or ""
        return [b.strip() for b in raw.split(",") if b.strip()]

    @property
    def tools(self) -> list[dict[str, Any]]:
        tools = self.captured.body.get("tools")
        return copy.deepcopy(tools) if isinstance(tools, list) else []

    @property
    def tool_names(self) -> list[str]:
        return [str(t["name"]) for t in self.tools if isinstance(t, dict) and "name" in t]

    @property
    def other_fields(self) -> dict[str, Any]:
        """The captured body's fields other than model, messages, system, tools and stream."""
        return {k: copy.deepcopy(v) for k, v in self.captured.body.items() if k not in _PER_REQUEST}

    # --- the next request ---------------------------------------------------------------------

    def system(self, cch: str) -> list[dict[str, Any]]:
        system: list[dict[str, Any]] = copy.deepcopy(self.captured.body["system"])
        system[0] = {**system[0], "text": with_cch(str(system[0]["text"]), cch)}
        return system

    def messages(self) -> list[dict[str, Any]]:
        """The history with the message breakpoint on the last block of the last user message."""
        messages = copy.deepcopy(self.history)
        for message in reversed(messages):
            if message.get("role") == "user":
                blocks = _content_blocks(message)
                blocks[-1] = {**blocks[-1], "cache_control": dict(EPHEMERAL)}
                message["content"] = blocks
                break
        return messages

    def headers(
        self, drop_betas: Iterable[str] = (), extra: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """The captured headers for the next request (the HTTP client adds key, host, length)."""
        dropped = set(drop_betas)
        headers: dict[str, str] = {}
        for name, value in self.captured.headers:
            lower = name.lower()
            if lower in _CLIENT_OWNED:
                continue
            if lower == "anthropic-beta":
                value = ",".join(b for b in self.betas if b not in dropped)
            headers[name] = value
        headers.update(extra or {})
        return headers

    def next_request(self, model: str | None = None) -> dict[str, Any]:
        """The next request's body fields (a fresh ``cch`` every call)."""
        self.requests_sent += 1
        return {
            "model": model or self.model,
            "messages": self.messages(),
            "system": self.system(cch_value(self.session_id, self.requests_sent)),
            "tools": self.tools,
        }

    def fold_system_messages(self) -> int:
        """Move mid-conversation ``role: "system"`` messages into ``<system-reminder>`` text blocks at
        the start of the first user message, as Claude Code does on upstreams without the
        ``mid-conversation-system`` beta (Bedrock, Vertex: README 1.4). Returns how many moved."""
        texts = [str(m["content"]) for m in self.history if m.get("role") == "system"]
        if not texts:
            return 0
        self.history = [m for m in self.history if m.get("role") != "system"]
        first = next(m for m in self.history if m.get("role") == "user")
        reminders = [{"type": "text", "text": f"<system-reminder>\n{t}\n</system-reminder>"} for t in texts]
        first["content"] = [*reminders, *_content_blocks(first)]
        return len(texts)

    # --- growing the conversation -------------------------------------------------------------

    def add_answer(self, content: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Append the assistant's answer; returns its tool_use blocks."""
        blocks = [echo_block(b) for b in content]
        self.history.append({"role": "assistant", "content": blocks})
        return [b for b in blocks if b["type"] == "tool_use"]

    def add_tool_results(self, results: Sequence[tuple[str, str]]) -> None:
        """Append one user message with a tool_result per ``(tool_use_id, content)``."""
        self.history.append({"role": "user", "content": [tool_result(i, c) for i, c in results]})

    def add_prompt(self, text: str) -> None:
        self.history.append({"role": "user", "content": [{"type": "text", "text": text}]})

    @property
    def called_tools(self) -> set[str]:
        return {
            str(b.get("name"))
            for m in self.history
            if m.get("role") == "assistant"
            for b in _content_blocks(m)
            if b.get("type") == "tool_use"
        }

    @property
    def last_is_tool_result(self) -> bool:
        last = self.history[-1] if self.history else {}
        return last.get("role") == "user" and any(
            b.get("type") == "tool_result" for b in _content_blocks(last)
        )
