"""Hashes of a request's cacheable prefix, segment by segment.

``cache_control`` markers and the leading billing-header block are left out of every hash;
messages are hashed cumulatively over their canonical JSON (:mod:`gateway.cache.canonical`).

Details: docs/internals/gateway-cache.md
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import orjson

from gateway.cache.canonical import canonical, digest
from gateway.cache.history import MessageScan, history_hashes, scan_messages

BILLING_HEADER_PREFIX: Final = "x-anthropic-billing-header:"


def is_billing_block(block: Any) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
        and block["text"].startswith(BILLING_HEADER_PREFIX)
    )


def system_blocks(payload: Mapping[str, Any]) -> list[Any]:
    """The system prompt as blocks (a string is one text block), without the leading billing block."""
    system = payload.get("system")
    if isinstance(system, str):
        return [{"type": "text", "text": system}] if system else []
    if not isinstance(system, list):
        return []
    return system[1:] if system and is_billing_block(system[0]) else list(system)


def _has_marker(block: Any) -> bool:
    return isinstance(block, dict) and isinstance(block.get("cache_control"), dict)


@dataclass(frozen=True, slots=True)
class PrefixHashes:
    model: str
    betas: str
    tools: str
    system: str  # the whole system prompt
    system_static: str  # up to and including its first marked block
    system_dynamic: str  # the rest
    messages: tuple[str, ...]
    ttls: tuple[str, ...]  # the ttl of every breakpoint, in prefix order
    first_message: str  # hash of messages[0] alone (a summary replacing history changes it)
    # SHA-256 of the JSON of every message but the last, as sent, without markers: lets the next
    # request reuse ``messages`` for the history it shares (not a segment: not compared, not shown)
    history_check: str = field(default="", compare=False)

    def to_json(self) -> bytes:
        """The segments' record (``history_check`` is stored beside it: a record stays readable
        by versions that do not know it)."""
        record = asdict(self)
        del record["history_check"]
        return orjson.dumps(record)

    @classmethod
    def from_json(cls, raw: bytes | str, history_check: str = "") -> PrefixHashes:
        data = orjson.loads(raw)
        data["messages"] = tuple(data["messages"])
        data["ttls"] = tuple(data["ttls"])
        return cls(**data, history_check=history_check)

    def summary(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "betas": self.betas,
            "tools": self.tools,
            "system": self.system,
            "system_static": self.system_static,
            "system_dynamic": self.system_dynamic,
            "messages": len(self.messages),
            "history": self.messages[-1] if self.messages else None,
            "ttls": list(self.ttls),
        }


def _ttls(payload: Mapping[str, Any], marked: Iterable[int] | None) -> tuple[str, ...]:
    from gateway.cache.breakpoints import locate_breakpoints

    return tuple(b.ttl for b in locate_breakpoints(payload, messages=marked))


def _list_json(parts: list[bytes]) -> bytes:
    """The canonical JSON of a list from its items' (what ``canonical`` of the list gives)."""
    return b"[" + b",".join(parts) + b"]"


def prefix_hashes(
    payload: Mapping[str, Any],
    betas: Iterable[str],
    *,
    previous: PrefixHashes | None = None,
    scan: MessageScan | None = None,
) -> PrefixHashes:
    """The prefix hashes of ``payload`` as sent with ``betas``. ``previous``: the session's last
    request, whose history hashes are reused where it is unchanged; ``scan``: a look at the
    messages of the body ``payload`` was edited from (what did not change is not looked at again).
    Neither changes the result."""
    tools = payload.get("tools")
    blocks = system_blocks(payload)
    split = next((i + 1 for i, block in enumerate(blocks) if _has_marker(block)), len(blocks))
    parts = [canonical(block) for block in blocks]
    if scan is None:
        settled = len(previous.messages) - 1 if previous is not None and previous.history_check else None
        scan = scan_messages(payload, settled)
    else:
        scan = scan.follow(payload)
    history = history_hashes(scan, previous)
    model = payload.get("model")
    return PrefixHashes(
        model=model if isinstance(model, str) else "",
        betas=digest(*(b.encode() for b in sorted(set(betas)))),
        tools=digest(canonical(tools if isinstance(tools, list) else [])),
        system=digest(_list_json(parts)),
        system_static=digest(_list_json(parts[:split])),
        system_dynamic=digest(_list_json(parts[split:])),
        messages=history.messages,
        ttls=_ttls(payload, scan.marked),
        first_message=history.first_message,
        history_check=history.check,
    )
