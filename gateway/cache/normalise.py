"""cache_control normalisation per upstream, so that the gateway never breaks a cache the client
kept intact and caching keeps working on every upstream.

Steps in order: billing header, ``scope``, ``ttl``, at most 4 breakpoints, ``GATEWAY_AUTO_CACHE``.
Copy-on-write only: a body no rule applies to stays the client's object (and bytes).

Details: docs/internals/gateway-cache.md
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gateway.cache.breakpoints import MAX_CACHE_BREAKPOINTS, JsonPath, locate_breakpoints, trim_breakpoints
from gateway.cache.latches import Latches
from gateway.cache.prefix import is_billing_block
from gateway.errors import ClientInputError

log = logging.getLogger("switchyard.cache")

_CCH: Final = re.compile(r"cch=[0-9a-fA-F]+;")
EPHEMERAL: Final = {"type": "ephemeral"}
ONE_HOUR: Final = {"type": "ephemeral", "ttl": "1h"}
LOGGED_DROPPED: Final = 8  # dropped markers named in the log line; the rest are counted
# markers read before a request is refused: trimming more than four is a courtesy to clients
# that overshoot a little, and each marker costs ~30 us across the steps (290,000: 8.8 s of the loop)
MAX_MARKERS: Final = 256


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
    marked: Sequence[int] | None = None  # the only messages that can hold a marker (None: any)


class _Edits:
    """Copy-on-write edits of a body: the containers on an edited path are copied once, the rest
    is shared with the original, which is never modified."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self._fresh: set[int] = set()

    def set(self, path: JsonPath, key: str | int, value: Any) -> None:
        if not self._fresh:
            self.body = dict(self.body)
            self._fresh.add(id(self.body))
        node: Any = self.body
        for step in path:
            child = node[step]
            if id(child) not in self._fresh:
                child = dict(child) if isinstance(child, dict) else list(child)
                self._fresh.add(id(child))
                node[step] = child
            node = child
        node[key] = value


class _Markers:
    """The body's ``cache_control`` markers by path (``()``: the top-level one), with the values
    the rules give them; the body itself is only touched by :meth:`apply`."""

    def __init__(self, body: Mapping[str, Any], marked: Sequence[int] | None) -> None:
        # prefix order: a nested block's prefix ends inside the block holding it, so it comes
        # first; ``outer_first`` lists a block before its nested ones, the other order an
        # upstream may check TTLs in. The top-level (automatic caching) marker marks the
        # prompt's last block: it comes last in both.
        self.prefix_order: list[JsonPath] = []
        self.outer_first: list[JsonPath] = []
        self.controls: dict[JsonPath, Mapping[str, Any]] = {}
        self.edited: dict[JsonPath, None] = {}
        tools = body.get("tools")
        if isinstance(tools, list):
            for i, tool in enumerate(tools):
                if isinstance(tool, dict) and isinstance(tool.get("cache_control"), dict):
                    self._found(("tools", i), tool["cache_control"], both=True)
        system = body.get("system")
        if isinstance(system, list):
            for i, block in enumerate(system):
                self._visit(("system", i), block)
        messages = body.get("messages")
        if isinstance(messages, list):
            for m in range(len(messages)) if marked is None else marked:
                message = messages[m] if m < len(messages) else None
                content = message.get("content") if isinstance(message, dict) else None
                if isinstance(content, list):
                    for i, block in enumerate(content):
                        self._visit(("messages", m, "content", i), block)
        if isinstance(body.get("cache_control"), dict):
            self._found((), body["cache_control"], both=True)

    def _found(self, path: JsonPath, control: Mapping[str, Any], *, both: bool) -> None:
        if len(self.controls) >= MAX_MARKERS:  # the API's own words for more than four
            raise ClientInputError(
                400,
                f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
                f"Found more than {MAX_MARKERS}.",
                error_type="invalid_request_error",
            )
        self.controls[path] = control
        self.outer_first.append(path)
        if both:
            self.prefix_order.append(path)

    def _visit(self, path: JsonPath, block: Any) -> None:
        if not isinstance(block, dict):
            return
        control = block.get("cache_control")
        marked = isinstance(control, dict)
        if isinstance(control, dict):
            self._found(path, control, both=False)
        nested = block.get("content")
        if isinstance(nested, list):
            for i, item in enumerate(nested):
                self._visit((*path, "content", i), item)
        if marked:
            self.prefix_order.append(path)

    def __getitem__(self, path: JsonPath) -> Mapping[str, Any]:
        return self.controls[path]

    def __setitem__(self, path: JsonPath, control: Mapping[str, Any]) -> None:
        self.controls[path] = control
        self.edited[path] = None

    def apply(self, edits: _Edits) -> None:
        for path in self.edited:
            edits.set(path, "cache_control", self.controls[path])


def normalise(
    payload: Mapping[str, Any], rules: CacheRules, latches: Latches, *, marked: Sequence[int] | None = None
) -> Normalised:
    """``payload`` as the rules send it upstream. ``marked``: the ascending indices of the only
    messages that can hold a marker (a :class:`~gateway.cache.history.MessageScan` finds them),
    so that a long history is not walked; ``None``: any message can."""
    body = payload if isinstance(payload, dict) else dict(payload)
    result = Normalised(body, marked=marked)
    edits = _Edits(body)
    _billing(edits, rules, result)
    markers = _Markers(body, marked)
    if markers.controls:
        _scope(markers, rules, latches, result)
        _ttl(markers, latches, result)
        markers.apply(edits)
    result.payload = edits.body
    if len(markers.controls) > MAX_CACHE_BREAKPOINTS:  # else the count is within the limit
        _limit(result)
    if rules.auto_cache and not markers.controls:
        _auto_cache(result, ONE_HOUR if latches.ttl_1h else EPHEMERAL)
    return result


def _billing(edits: _Edits, rules: CacheRules, result: Normalised) -> None:
    system = edits.body.get("system")
    if not rules.normalise_billing_header or not isinstance(system, list) or not system:
        return
    first = system[0]
    if is_billing_block(first):
        pinned = _CCH.sub("cch=00000;", first["text"])
        if pinned != first["text"]:
            edits.set(("system",), 0, {**first, "text": pinned})
            result.changed = True
            result.notes.append("billing header cch pinned")


def _scope(markers: _Markers, rules: CacheRules, latches: Latches, result: Normalised) -> None:
    allowed = rules.provider == "anthropic" and latches.global_scope is not False
    if allowed:
        return
    removed = False
    for path in markers.prefix_order:
        control = markers[path]
        if "scope" in control:
            markers[path] = {k: v for k, v in control.items() if k != "scope"}
            removed = True
    if removed:
        result.changed = True
        result.notes.append("scope removed")


def _ttl(markers: _Markers, latches: Latches, result: Normalised) -> None:
    if latches.ttl_1h is not None:
        for path in markers.prefix_order:
            control = markers[path]
            if latches.ttl_1h and control.get("ttl") != "1h":
                markers[path] = _with_ttl(control, "1h")
                result.changed = True
            elif not latches.ttl_1h and control.get("ttl") == "1h":
                markers[path] = {k: v for k, v in control.items() if k != "ttl"}
                result.changed = True
    # 1h entries must precede 5m ones: upgrade any 5m breakpoint that comes before a 1h one, in
    # prefix order and with blocks before their nested ones (the two orders differ only inside a
    # block whose nested content is marked too), until both hold; upgrades only add 1h entries,
    # so this ends
    upgraded, again = False, True
    while again:
        again = False
        for order in (markers.prefix_order, markers.outer_first):
            last = max((i for i, p in enumerate(order) if markers[p].get("ttl") == "1h"), default=-1)
            for path in order[: max(last, 0)]:
                if markers[path].get("ttl") != "1h":
                    markers[path] = _with_ttl(markers[path], "1h")
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
    if len(locate_breakpoints(result.payload, messages=result.marked)) <= MAX_CACHE_BREAKPOINTS:
        return
    trimmed = trim_breakpoints(result.payload, messages=result.marked)
    result.payload = trimmed.body
    result.changed = True
    names = ["/".join(str(p) for p in b.path) or "top-level" for b in trimmed.dropped]
    result.notes.append(f"dropped breakpoints: {', '.join(names)}")
    # one short line whatever the client sent (a body can hold hundreds of thousands of markers)
    shown = ", ".join(names[:LOGGED_DROPPED])
    more = f" and {len(names) - LOGGED_DROPPED} more" if len(names) > LOGGED_DROPPED else ""
    log.info("more than 4 cache breakpoints: dropped %s%s", shown, more)


def _auto_cache(result: Normalised, control: Mapping[str, str]) -> None:
    edits = _Edits(result.payload)
    body = result.payload
    placed = False
    system = body.get("system")
    tools = body.get("tools")
    if isinstance(system, str) and system:
        edits.set((), "system", [{"type": "text", "text": system, "cache_control": dict(control)}])
        placed = True
    elif isinstance(system, list) and system and isinstance(system[-1], dict):
        edits.set(("system",), len(system) - 1, {**system[-1], "cache_control": dict(control)})
        placed = True
    elif isinstance(tools, list) and tools and isinstance(tools[-1], dict):
        edits.set(("tools",), len(tools) - 1, {**tools[-1], "cache_control": dict(control)})
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
                edits.set(("messages",), index, {**message, "content": content})
                placed = True
            break
    if placed:
        result.payload = edits.body
        result.changed = True
        result.notes.append("automatic breakpoints placed")
