"""The cacheable prompt as a flat list of blocks, in the order the API caches it.

The prefix order is ``tools`` → ``system`` → ``messages``. Each tool is one block, each system
text block is one block (a string ``system`` is one block), each message content block is one
block (a string message content is one block). Each block carries its token count and, if it is a
cache breakpoint, its :class:`CacheMarker`.

Assumption (Claude Code first-party mode): a *leading* system text block whose text starts with
``x-anthropic-billing-header:`` (and which carries no ``cache_control``) is outside the cache key,
because Claude Code recomputes its ``cch=`` value on every request. Its tokens still count, as
uncached input.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from .json_types import JSONObject, canonical_json, without_cache_control
from .tokens import MESSAGE_OVERHEAD, REQUEST_OVERHEAD, content_block_tokens, tool_tokens

Ttl = Literal["5m", "1h"]
TTL_SECONDS: dict[Ttl, float] = {"5m": 300.0, "1h": 3600.0}
BILLING_HEADER_PREFIX = "x-anthropic-billing-header:"


@dataclass(frozen=True, slots=True)
class CacheMarker:
    """A ``cache_control`` breakpoint: where it sits and how long the entry lives."""

    path: str
    ttl: Ttl
    scope: str | None = None


@dataclass(frozen=True, slots=True)
class PromptBlock:
    """One cacheable block: its JSON path, hash input, token count and optional breakpoint."""

    path: str
    key: bytes
    tokens: int
    marker: CacheMarker | None


@dataclass(frozen=True, slots=True)
class FlatPrompt:
    """The flattened prompt plus the tokens that are never part of a cacheable prefix."""

    blocks: tuple[PromptBlock, ...]
    uncached_tokens: int
    auto_marker: bool = False
    """True when a top-level ``cache_control`` added the marker of the last block."""

    @property
    def total_tokens(self) -> int:
        """What ``count_tokens`` reports for this prompt."""
        return self.uncached_tokens + sum(b.tokens for b in self.blocks)

    @property
    def breakpoints(self) -> tuple[int, ...]:
        """Indices of the blocks carrying a cache marker, in prefix order."""
        return tuple(i for i, b in enumerate(self.blocks) if b.marker is not None)


def iter_cache_controls(body: JSONObject) -> Iterator[tuple[str, Any]]:
    """Every block-level ``cache_control`` value in prefix order, with the path of its block.

    Nested markers (inside ``tool_result`` content or document sources) are included; the
    top-level (automatic caching) ``cache_control`` is not.
    """
    tools = body.get("tools")
    if isinstance(tools, list):
        for i, tool in enumerate(tools):
            if isinstance(tool, dict) and "cache_control" in tool:
                yield f"tools.{i}", tool["cache_control"]
    system = body.get("system")
    if isinstance(system, list):
        for i, block in enumerate(system):
            yield from _block_markers(f"system.{i}", block)
    messages = body.get("messages")
    if isinstance(messages, list):
        for m, message in enumerate(messages):
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):
                for i, block in enumerate(content):
                    yield from _block_markers(f"messages.{m}.content.{i}", block)


def _block_markers(path: str, block: Any) -> Iterator[tuple[str, Any]]:
    if not isinstance(block, dict):
        return
    if "cache_control" in block:
        yield path, block["cache_control"]
    nested = block.get("content")
    if isinstance(nested, list):
        for i, sub in enumerate(nested):
            yield from _block_markers(f"{path}.content.{i}", sub)


def parse_marker(path: str, value: Any) -> CacheMarker | None:
    """A marker from an already validated ``cache_control`` value (``None`` stays ``None``)."""
    if not isinstance(value, dict):
        return None
    ttl: Ttl = "1h" if value.get("ttl") == "1h" else "5m"
    scope = value.get("scope")
    return CacheMarker(path, ttl, scope if isinstance(scope, str) else None)


def is_billing_block(block: Any) -> bool:
    """True for Claude Code's per-request ``x-anthropic-billing-header`` system block."""
    return (
        isinstance(block, dict)
        and block.get("type") == "text"
        and "cache_control" not in block
        and str(block.get("text", "")).startswith(BILLING_HEADER_PREFIX)
    )


def _last_marker(path: str, block: Any) -> CacheMarker | None:
    marker: CacheMarker | None = None
    for marker_path, value in _block_markers(path, block):
        marker = parse_marker(marker_path, value) or marker
    return marker


def flatten_prompt(body: JSONObject) -> FlatPrompt:
    """Flatten a validated request body (``messages`` or ``count_tokens``) into a :class:`FlatPrompt`."""
    blocks: list[PromptBlock] = []
    uncached = REQUEST_OVERHEAD

    tools = body.get("tools")
    for i, tool in enumerate(tools if isinstance(tools, list) else []):
        path = f"tools.{i}"
        marker = parse_marker(path, tool.get("cache_control"))
        blocks.append(PromptBlock(path, _key("tools", tool), tool_tokens(tool), marker))

    system = body.get("system")
    if isinstance(system, str) and system:
        block = {"type": "text", "text": system}
        blocks.append(PromptBlock("system", _key("system", block), content_block_tokens(block), None))
    elif isinstance(system, list):
        for i, block in enumerate(system):
            if i == 0 and is_billing_block(block):
                uncached += content_block_tokens(block)
                continue
            path = f"system.{i}"
            blocks.append(
                PromptBlock(
                    path, _key("system", block), content_block_tokens(block), _last_marker(path, block)
                )
            )

    for m, message in enumerate(body.get("messages") or []):
        role = message.get("role")
        content = message.get("content")
        items: list[tuple[str, JSONObject]]
        if isinstance(content, str):
            items = [(f"messages.{m}.content", {"type": "text", "text": content})]
        else:
            items = [(f"messages.{m}.content.{i}", b) for i, b in enumerate(content or [])]
        if not items:
            empty_key = _key("messages", {"index": m, "role": role, "empty": True})
            blocks.append(PromptBlock(f"messages.{m}", empty_key, MESSAGE_OVERHEAD, None))
            continue
        for i, (path, block) in enumerate(items):
            tokens = content_block_tokens(block) + (MESSAGE_OVERHEAD if i == 0 else 0)
            key = _key("messages", {"index": m, "role": role, "block": block})
            blocks.append(PromptBlock(path, key, tokens, _last_marker(path, block)))

    auto = body.get("cache_control")
    if isinstance(auto, dict) and blocks and blocks[-1].marker is None:
        last = blocks[-1]
        blocks[-1] = PromptBlock(last.path, last.key, last.tokens, parse_marker(last.path, auto))
        return FlatPrompt(tuple(blocks), uncached, auto_marker=True)
    return FlatPrompt(tuple(blocks), uncached)


def _key(section: str, value: Any) -> bytes:
    return canonical_json([section, without_cache_control(value)])


__all__ = [
    "BILLING_HEADER_PREFIX",
    "TTL_SECONDS",
    "CacheMarker",
    "FlatPrompt",
    "PromptBlock",
    "Ttl",
    "flatten_prompt",
    "is_billing_block",
    "iter_cache_controls",
    "parse_marker",
]
