"""The per-session memo of cached sections: one :class:`SectionCache` per conversation.

A cached section's ``compute`` runs on the first request of a session that needs it; later
requests reuse the text, even if the inputs it read have changed since (the value is latched for
the session, like the cache TTL, so a mid-session change cannot move the cached prefix). A new
session, :meth:`SectionCache.clear` (``/clear``, after compaction) or
:meth:`SectionCache.invalidate` recompute it. The memo is an explicit object, never a module
global, so two sessions in one process cannot see each other's sections.

Concurrent requests of one session compute a section once (a per-name ``asyncio.Lock``). A
``compute`` that raises is not memoised: the next request tries again. Uncached sections pass
straight through and are evaluated on every call.
"""

from __future__ import annotations

import asyncio

from loop.prompt.inputs import PromptInputs
from loop.prompt.sections import SystemPromptSection


class SectionCache:
    """Memoised section texts of one session, keyed by section name."""

    __slots__ = ("_locks", "_values")

    def __init__(self) -> None:
        self._values: dict[str, str | None] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def resolve(self, section: SystemPromptSection, inputs: PromptInputs) -> str | None:
        """The section's text for this request: memoised if cached, freshly computed otherwise."""
        if not section.cached:
            return await section.evaluate(inputs)
        name = section.name
        if name in self._values:
            return self._values[name]
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            if name in self._values:  # computed by a concurrent request while we waited
                return self._values[name]
            value = await section.evaluate(inputs)
            self._values[name] = value
            return value

    def invalidate(self, name: str) -> None:
        """Forget one section: its next request recomputes it."""
        self._values.pop(name, None)

    def clear(self) -> None:
        """Forget every section (e.g. after ``/clear`` or a compaction)."""
        self._values.clear()

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"SectionCache({sorted(self._values)!r})"
