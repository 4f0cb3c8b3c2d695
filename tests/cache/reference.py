"""The cache step as it was before it was made cheap (deep copies, Python walks, every message
hashed on every request), kept verbatim as the oracle the fast code is tested against
(tests/cache/test_reference_equivalence.py): same prefix hashes, same normalised bodies."""

from __future__ import annotations

import copy
import hashlib
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from gateway.cache.breakpoints import locate_breakpoints, trim_breakpoints
from gateway.cache.latches import Latches
from gateway.cache.normalise import CacheRules
from gateway.cache.prefix import PrefixHashes, is_billing_block, system_blocks

log = logging.getLogger("switchyard.cache")

# -- gateway/cache/prefix.py ------------------------------------------------------------------------


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


def _as_blocks(message: Any) -> Any:
    """A message whose content is a string, as the single text block the API renders it as (the
    automatic breakpoint turns the one it marks into that block)."""
    if isinstance(message, Mapping) and isinstance(message.get("content"), str):
        return {**message, "content": [{"type": "text", "text": message["content"]}]}
    return message


def _has_marker(block: Any) -> bool:
    return isinstance(block, Mapping) and isinstance(block.get("cache_control"), Mapping)


def _ttls(payload: Mapping[str, Any]) -> tuple[str, ...]:
    from gateway.cache.breakpoints import locate_breakpoints

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


# -- gateway/cache/normalise.py ---------------------------------------------------------------------

_CCH: Final = re.compile(r"cch=[0-9a-fA-F]+;")
EPHEMERAL: Final = {"type": "ephemeral"}
ONE_HOUR: Final = {"type": "ephemeral", "ttl": "1h"}


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
