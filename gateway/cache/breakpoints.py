"""Cache breakpoints of a whole request: find them, count them, keep at most four.

Used by the cache pipeline and re-exported by ``loop.prompt``. :func:`trim_breakpoints` keeps
``scope: "global"`` markers first, then those furthest along ``tools -> system -> messages``,
and never reorders the survivors (a 1h marker still never follows a 5-minute one).

Details: docs/internals/gateway-cache.md
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

MAX_CACHE_BREAKPOINTS: Final = 4

JsonPath: TypeAlias = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Breakpoint:
    """One ``cache_control`` marker of a request."""

    path: JsonPath
    """Where the marker's block sits, e.g. ``("messages", 3, "content", 0)``; ``()`` is the
    top-level (automatic caching) marker."""
    position: int
    """Rank in prefix order (0 is the shortest prefix)."""
    ttl: str
    global_scope: bool


@dataclass(frozen=True, slots=True)
class TrimResult:
    """A request body with at most the allowed breakpoints, and which markers were kept or dropped."""

    body: dict[str, Any]
    kept: tuple[Breakpoint, ...]
    dropped: tuple[Breakpoint, ...]


def _block_markers(path: JsonPath, block: Any) -> Iterator[tuple[JsonPath, Mapping[str, Any]]]:
    if not isinstance(block, dict):
        return
    nested = block.get("content")
    if isinstance(nested, list):
        for i, sub in enumerate(nested):
            yield from _block_markers((*path, "content", i), sub)
    control = block.get("cache_control")
    if isinstance(control, dict):
        yield path, control


def _block_markers_of(
    body: Mapping[str, Any], marked: Iterable[int] | None = None
) -> Iterator[tuple[JsonPath, Mapping[str, Any]]]:
    tools = body.get("tools")
    if isinstance(tools, list):
        for i, tool in enumerate(tools):
            control = tool.get("cache_control") if isinstance(tool, dict) else None
            if isinstance(control, dict):
                yield ("tools", i), control
    system = body.get("system")
    if isinstance(system, list):
        for i, block in enumerate(system):
            yield from _block_markers(("system", i), block)
    messages = body.get("messages")
    if isinstance(messages, list):
        for m in range(len(messages)) if marked is None else marked:
            message = messages[m] if m < len(messages) else None
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):
                for i, block in enumerate(content):
                    yield from _block_markers(("messages", m, "content", i), block)


def _last_block_path(body: Mapping[str, Any]) -> JsonPath | None:
    """Path of the prompt's last block (the one automatic caching marks), if any."""
    messages = body.get("messages")
    if isinstance(messages, list) and messages:
        last = len(messages) - 1
        content = messages[last].get("content") if isinstance(messages[last], dict) else None
        if isinstance(content, list) and content:
            return ("messages", last, "content", len(content) - 1)
        return ("messages", last)
    system = body.get("system")
    if isinstance(system, list) and system:
        return ("system", len(system) - 1)
    if isinstance(system, str) and system:
        return ("system",)
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        return ("tools", len(tools) - 1)
    return None


def _breakpoint(path: JsonPath, position: int, control: Mapping[str, Any]) -> Breakpoint:
    return Breakpoint(
        path, position, "1h" if control.get("ttl") == "1h" else "5m", control.get("scope") == "global"
    )


def locate_breakpoints(body: Mapping[str, Any], *, messages: Iterable[int] | None = None) -> list[Breakpoint]:
    """Every breakpoint of a request body, in prefix order. ``messages``: the ascending indices of
    the only messages that can hold a marker (the others are known to hold none), so that a long
    history is not walked; ``None``: any message can."""
    found = [
        _breakpoint(path, i, control) for i, (path, control) in enumerate(_block_markers_of(body, messages))
    ]
    automatic = body.get("cache_control")
    last = _last_block_path(body)
    marked_last = last is not None and any(b.path[: len(last)] == last for b in found)
    if isinstance(automatic, dict) and last is not None and not marked_last:
        found.append(_breakpoint((), len(found), automatic))
    return found


def count_breakpoints(body: Mapping[str, Any]) -> int:
    """How many of the request's 4 ``cache_control`` slots ``body`` uses."""
    return len(locate_breakpoints(body))


def _without_markers(body: Mapping[str, Any], paths: list[JsonPath]) -> dict[str, Any]:
    """A copy of ``body`` without the markers at ``paths``; only the containers on those paths
    are copied, everything else is shared with ``body``."""
    root: dict[str, Any] = dict(body)
    fresh = {id(root)}
    for path in paths:
        node: Any = root
        for key in path:
            child = node[key]
            if id(child) not in fresh:
                child = dict(child) if isinstance(child, dict) else list(child)
                fresh.add(id(child))
                node[key] = child
            node = child
        del node["cache_control"]
    return root


def trim_breakpoints(
    body: Mapping[str, Any],
    *,
    limit: int = MAX_CACHE_BREAKPOINTS,
    messages: Iterable[int] | None = None,
) -> TrimResult:
    """``body`` with its lowest-value breakpoints removed so that at most ``limit`` remain.

    ``body`` is never modified. The result's body is a shallow copy whose containers on the paths
    of dropped markers are copies too (when nothing is dropped it is a plain shallow copy).
    ``messages`` as for :func:`locate_breakpoints`.
    """
    marked = None if messages is None else tuple(messages)
    if limit < 0:
        raise ValueError(f"limit must be >= 0, not {limit}")
    current: Mapping[str, Any] = body
    all_dropped: list[Breakpoint] = []
    while True:
        located = locate_breakpoints(current, messages=marked)
        ranked = sorted(located, key=lambda b: (b.global_scope, b.position), reverse=True)
        kept = sorted(ranked[:limit], key=lambda b: b.position)
        dropped = sorted(ranked[limit:], key=lambda b: b.position)
        trimmed = _without_markers(current, [b.path for b in dropped])
        # dropping the marker of the prompt's last block frees the automatic (top-level) marker,
        # which then takes a slot of its own: trim again until the request fits
        all_dropped.extend(dropped)
        if not dropped or len(locate_breakpoints(trimmed, messages=marked)) <= limit:
            return TrimResult(trimmed, tuple(kept), tuple(sorted(all_dropped, key=lambda b: b.position)))
        current = trimmed
