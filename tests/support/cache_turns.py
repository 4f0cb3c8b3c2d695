"""Claude Code turns for the cache tests: the captured tool session (015-017) as editable requests
(headers in wire order, body), with their cache markers and betas at hand."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from tests.support.real_clients import HOP_HEADERS, REAL_CLIENTS

TOOL_BASH = ["015_cc_tool_bash_turn1", "016_cc_tool_bash_turn2", "017_cc_tool_bash_turn3"]
SESSION_HEADER = "X-Claude-Code-Session-Id"


@dataclass
class Turn:
    """One captured request: headers in wire order and the body, editable before it is sent."""

    headers: list[tuple[str, str]]
    body: dict[str, Any]
    path: str = "/v1/messages?beta=true"

    @classmethod
    def load(cls, name: str) -> Turn:
        fixture = json.loads((REAL_CLIENTS / f"{name}.json").read_text())
        headers = [(k, v) for k, v in fixture["headers"] if k.lower() not in HOP_HEADERS]
        return cls(headers, fixture["body"], fixture["raw_path"])

    def copy(self) -> Turn:
        return Turn(list(self.headers), copy.deepcopy(self.body), self.path)

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def set_header(self, name: str, value: str | None) -> Turn:
        self.headers = [(k, v) for k, v in self.headers if k.lower() != name.lower()]
        if value is not None:
            self.headers.append((name, value))
        return self

    @property
    def betas(self) -> list[str]:
        value = self.header("anthropic-beta")
        return [] if value is None else value.split(",")

    def without_betas(self, *names: str) -> Turn:
        kept = [b for b in self.betas if b not in names]
        return self.set_header("anthropic-beta", ",".join(kept) if kept else None)

    def with_session(self, session_id: str | None) -> Turn:
        """The turn as another session sends it (``None``: no session id anywhere)."""
        self.set_header(SESSION_HEADER, session_id)
        metadata = self.body.get("metadata")
        if isinstance(metadata, dict):
            if session_id is None:
                del self.body["metadata"]
            else:
                user = json.loads(metadata["user_id"])
                metadata["user_id"] = json.dumps({**user, "session_id": session_id}, separators=(",", ":"))
        return self

    def markers(self) -> list[dict[str, Any]]:
        """Every block-level cache_control of the body, in prefix order (nested ones too)."""
        return [block["cache_control"] for block in marked_blocks(self.body)]

    def strip_markers(self) -> Turn:
        for block in marked_blocks(self.body):
            del block["cache_control"]
        return self

    def wire(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":"), ensure_ascii=False).encode()


def marked_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def visit(block: Any) -> None:
        if isinstance(block, dict):
            nested = block.get("content")
            for sub in nested if isinstance(nested, list) else []:
                visit(sub)
            if isinstance(block.get("cache_control"), dict):
                found.append(block)

    for section in ("tools", "system"):
        items = body.get(section)
        for block in items if isinstance(items, list) else []:
            visit(block)
    for message in body.get("messages", []):
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            visit(block)
    return found


def claude_code_session(session_id: str) -> list[Turn]:
    """Turns 1-3 of the captured Claude Code tool session, re-labelled as ``session_id``."""
    return [Turn.load(name).with_session(session_id) for name in TOOL_BASH]


def strip_markers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_markers(v) for v in value]
    return value


def ordered_bytes(value: Any) -> bytes:
    """``value`` serialised in its own key order (json.loads keeps the wire order)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
