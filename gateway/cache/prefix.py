"""Hashes of a request's cacheable prefix, segment by segment.

The prompt cache keys on the exact prefix ``tools -> system -> messages`` (per model, and per the
betas that change how the prompt is rendered: the caller passes only those, the latchable ones).
To explain a cache miss the gateway hashes each segment of every request and compares with the
session's previous request: the first segment that differs is why the cache broke.

* ``cache_control`` markers are left out of every hash: moving a breakpoint (Claude Code moves the
  message breakpoint to the newest block every turn) does not change the prefix. (Only where the
  system prompt splits into its static and dynamic parts, reported for diagnosis, follows its
  first marker; whether the system prompt changed is decided on the whole of it.)
* The leading ``x-anthropic-billing-header`` system block is left out too: it carries a per-request
  value in some client modes and is not part of what a cache hit depends on (see normalise.py for
  the upstreams where it would be).
* A string system prompt or message content hashes as the single text block it stands for.
* Messages are hashed cumulatively, so ``messages[i]`` is the hash of the whole history up to and
  including message ``i``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

import orjson

BILLING_HEADER_PREFIX: Final = "x-anthropic-billing-header:"


def _strip_markers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_markers(v) for v in value]
    return value


def _digest(*parts: bytes) -> str:
    hasher = hashlib.blake2b(digest_size=10)
    for part in parts:
        hasher.update(part)
        hasher.update(b"\x00")
    return hasher.hexdigest()


def canonical(value: Any) -> bytes:
    return orjson.dumps(_strip_markers(value), option=orjson.OPT_SORT_KEYS)


def is_billing_block(block: Any) -> bool:
    return (
        isinstance(block, Mapping)
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


def _as_blocks(message: Any) -> Any:
    """A message whose content is a string, as the single text block the API renders it as (the
    automatic breakpoint turns the one it marks into that block)."""
    if isinstance(message, Mapping) and isinstance(message.get("content"), str):
        return {**message, "content": [{"type": "text", "text": message["content"]}]}
    return message


def _has_marker(block: Any) -> bool:
    return isinstance(block, Mapping) and isinstance(block.get("cache_control"), Mapping)


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

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes | str) -> PrefixHashes:
        data = orjson.loads(raw)
        data["messages"] = tuple(data["messages"])
        data["ttls"] = tuple(data["ttls"])
        return cls(**data)

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


def _ttls(payload: Mapping[str, Any]) -> tuple[str, ...]:
    from gateway.prompt.breakpoints import locate_breakpoints

    return tuple(b.ttl for b in locate_breakpoints(payload))


def prefix_hashes(payload: Mapping[str, Any], betas: Iterable[str]) -> PrefixHashes:
    tools = payload.get("tools")
    blocks = system_blocks(payload)
    split = next((i + 1 for i, block in enumerate(blocks) if _has_marker(block)), len(blocks))
    messages = payload.get("messages")
    history: list[str] = []
    running = b""
    first = ""
    if isinstance(messages, list):
        for index, message in enumerate(messages):
            encoded = canonical(_as_blocks(message))
            running = _digest(running, encoded).encode()
            history.append(running.decode())
            if index == 0:
                first = _digest(encoded)
    model = payload.get("model")
    return PrefixHashes(
        model=model if isinstance(model, str) else "",
        betas=_digest(*(b.encode() for b in sorted(set(betas)))),
        tools=_digest(canonical(tools if isinstance(tools, list) else [])),
        system=_digest(canonical(blocks)),
        system_static=_digest(canonical(blocks[:split])),
        system_dynamic=_digest(canonical(blocks[split:])),
        messages=tuple(history),
        ttls=_ttls(payload),
        first_message=first,
    )
