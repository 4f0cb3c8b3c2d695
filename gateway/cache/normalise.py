"""cache_control normalisation per upstream, so that the gateway never breaks a cache the client
kept intact and caching keeps working on every upstream.

Applied in this order (each step only when needed; an untouched body keeps the client's bytes):

1. Billing header: Claude Code's first system block ``x-anthropic-billing-header: ...; cch=<hex>;``
   changes on every request in some modes. An upstream that treats it as part of the cached
   prefix (Bedrock and Vertex by default, ``GATEWAY_NORMALISE_BILLING_HEADER``) would miss every
   time, so its ``cch=`` value is pinned to ``00000`` (what Claude Code itself sends to Vertex).
2. ``scope``: only the first-party API accepts ``scope: "global"``; it is removed elsewhere, and
   also when the session's global-scope latch is off (decided at its first request).
3. ``ttl``: the session's 1h latch decides: on, every breakpoint gets ``ttl: "1h"``; off,
   ``ttl: "1h"`` becomes the 5-minute default. Then 1h entries must come before 5m ones: a 5m
   breakpoint before a 1h one is upgraded (the earlier, more stable prefix deserves the longer TTL).
4. At most 4 breakpoints: when a client sends more, the ones protecting the longest prefixes are
   kept (and ``scope: "global"`` ones first), and the dropped ones are logged, instead of a 400.
5. ``GATEWAY_AUTO_CACHE=1``: a request carrying no breakpoint at all gets two: at the end of
   tools+system and on the last block of the last user message (with the 1-hour TTL when the
   session's latch says so).
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gateway.cache.latches import Latches
from gateway.cache.prefix import is_billing_block
from gateway.prompt.breakpoints import locate_breakpoints, trim_breakpoints

log = logging.getLogger("switchyard.cache")

_CCH: Final = re.compile(r"cch=[0-9a-fA-F]+;")
EPHEMERAL: Final = {"type": "ephemeral"}
ONE_HOUR: Final = {"type": "ephemeral", "ttl": "1h"}


@dataclass(frozen=True, slots=True)
class CacheRules:
    provider: str
    normalise_billing_header: bool
    auto_cache: bool


@dataclass(slots=True)
class Normalised:
    payload: dict[str, Any]
    changed: bool = False
    notes: list[str] = field(default_factory=list)


def _controls(payload: dict[str, Any], *, outer_first: bool = False) -> list[dict[str, Any]]:
    """Every block carrying a cache_control (tools, system, messages and blocks nested in them, such
    as ``tool_result`` content), in prefix order: a nested block's prefix ends inside the block
    holding it, so it comes first. ``outer_first`` lists a block before its nested ones instead,
    the other order an upstream may check TTLs in."""
    found: list[dict[str, Any]] = []

    def visit(block: Any) -> None:
        if not isinstance(block, dict):
            return
        marked = isinstance(block.get("cache_control"), dict)
        if marked and outer_first:
            found.append(block)
        nested = block.get("content")
        if isinstance(nested, list):
            for item in nested:
                visit(item)
        if marked and not outer_first:
            found.append(block)

    tools = payload.get("tools")
    if isinstance(tools, list):
        found.extend(t for t in tools if isinstance(t, dict) and isinstance(t.get("cache_control"), dict))
    system = payload.get("system")
    if isinstance(system, list):
        for block in system:
            visit(block)
    messages = payload.get("messages")
    if isinstance(messages, list):
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):
                for block in content:
                    visit(block)
    return found


def normalise(payload: Mapping[str, Any], rules: CacheRules, latches: Latches) -> Normalised:
    result = Normalised(copy.deepcopy(dict(payload)))
    body = result.payload
    _billing(body, rules, result)
    # the top-level (automatic caching) marker marks the prompt's last block: it comes last
    top = [body] if isinstance(body.get("cache_control"), dict) else []
    marked = [*_controls(body), *top]
    _scope(marked, rules, latches, result)
    _ttl(marked, [*_controls(body, outer_first=True), *top], latches, result)
    _limit(result)
    if rules.auto_cache and not marked:
        _auto_cache(body, result, ONE_HOUR if latches.ttl_1h else EPHEMERAL)
    return result


def _billing(body: dict[str, Any], rules: CacheRules, result: Normalised) -> None:
    system = body.get("system")
    if not rules.normalise_billing_header or not isinstance(system, list) or not system:
        return
    first = system[0]
    if is_billing_block(first):
        pinned = _CCH.sub("cch=00000;", first["text"])
        if pinned != first["text"]:
            system[0] = {**first, "text": pinned}
            result.changed = True
            result.notes.append("billing header cch pinned")


def _scope(controls: list[dict[str, Any]], rules: CacheRules, latches: Latches, result: Normalised) -> None:
    allowed = rules.provider == "anthropic" and latches.global_scope is not False
    if allowed:
        return
    removed = False
    for block in controls:
        control = block["cache_control"]
        if "scope" in control:
            block["cache_control"] = {k: v for k, v in control.items() if k != "scope"}
            removed = True
    if removed:
        result.changed = True
        result.notes.append("scope removed")


def _ttl(
    controls: list[dict[str, Any]], outer_first: list[dict[str, Any]], latches: Latches, result: Normalised
) -> None:
    if latches.ttl_1h is not None:
        for block in controls:
            control = block["cache_control"]
            if latches.ttl_1h and control.get("ttl") != "1h":
                block["cache_control"] = _with_ttl(control, "1h")
                result.changed = True
            elif not latches.ttl_1h and control.get("ttl") == "1h":
                block["cache_control"] = {k: v for k, v in control.items() if k != "ttl"}
                result.changed = True
    # 1h entries must precede 5m ones: upgrade any 5m breakpoint that comes before a 1h one, in
    # prefix order and with blocks before their nested ones (the two orders differ only inside a
    # block whose nested content is marked too), until both hold; upgrades only add 1h entries,
    # so this ends
    upgraded, again = False, True
    while again:
        again = False
        for order in (controls, outer_first):
            last = max((i for i, b in enumerate(order) if b["cache_control"].get("ttl") == "1h"), default=-1)
            for block in order[: max(last, 0)]:
                if block["cache_control"].get("ttl") != "1h":
                    block["cache_control"] = _with_ttl(block["cache_control"], "1h")
                    upgraded = again = True
    if upgraded:
        result.changed = True
        result.notes.append("5m breakpoint before a 1h one upgraded")


def _with_ttl(control: Mapping[str, Any], ttl: str) -> dict[str, Any]:
    """``control`` with ``ttl``, keeping the key order clients use (type, ttl, scope)."""
    ordered: dict[str, Any] = {"type": control.get("type", "ephemeral"), "ttl": ttl}
    ordered.update((k, v) for k, v in control.items() if k not in ("type", "ttl"))
    return ordered


def _limit(result: Normalised) -> None:
    if len(locate_breakpoints(result.payload)) <= 4:
        return
    trimmed = trim_breakpoints(result.payload)
    result.payload = trimmed.body
    result.changed = True
    dropped = ", ".join("/".join(str(p) for p in b.path) or "top-level" for b in trimmed.dropped)
    result.notes.append(f"dropped breakpoints: {dropped}")
    log.info("more than 4 cache breakpoints: dropped %s", dropped)


def _auto_cache(body: dict[str, Any], result: Normalised, control: Mapping[str, str]) -> None:
    placed = False
    system = body.get("system")
    tools = body.get("tools")
    if isinstance(system, str) and system:
        body["system"] = [{"type": "text", "text": system, "cache_control": dict(control)}]
        placed = True
    elif isinstance(system, list) and system and isinstance(system[-1], dict):
        system[-1] = {**system[-1], "cache_control": dict(control)}
        placed = True
    elif isinstance(tools, list) and tools and isinstance(tools[-1], dict):
        tools[-1] = {**tools[-1], "cache_control": dict(control)}
        placed = True
    messages = body.get("messages")
    if isinstance(messages, list):
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if not isinstance(message, dict) or message.get("role") != "user":
                continue
            content = message.get("content")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            if isinstance(content, list) and content and isinstance(content[-1], dict):
                content = [*content[:-1], {**content[-1], "cache_control": dict(control)}]
                messages[index] = {**message, "content": content}
                placed = True
            break
    if placed:
        result.changed = True
        result.notes.append("automatic breakpoints placed")
