"""What outlives one ``query()`` call: the auto-compact circuit breaker, the stored tool results
and the memoised system-prompt sections.

Pass the same ``ContextSession`` to every run of one conversation (``QueryParams.session``): a
breaker that tripped in one run stays open in the next until its cool-down has passed, a result a
layer shortened in one run can still be read back (``read_tool_result``) in the next, and an
assembled system prompt (``loop.system_prompt.AgentPrompt``) keeps the same bytes in every run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from loop.context.result import StoredText
from loop.messages import Message
from loop.prompt.section_cache import SectionCache

_SAFE_ID = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(slots=True)
class CircuitBreaker:
    """Consecutive summarisation failures; open (no attempt) after ``threshold`` of them, then
    half-open (one attempt) once ``cooldown_s`` has passed: a success closes it, a failure opens
    it again for another cool-down."""

    consecutive_failures: int = 0
    opened_at: float | None = None
    trips: int = 0

    def allows(self, now: float, cooldown_s: float) -> bool:
        return self.opened_at is None or now - self.opened_at >= cooldown_s

    def record_success(self) -> None:
        self.consecutive_failures = 0
        self.opened_at = None

    def record_failure(self, now: float, threshold: int) -> bool:
        """Count one failure; ``True`` when this one opened the breaker."""
        self.consecutive_failures += 1
        if self.consecutive_failures < threshold and self.opened_at is None:
            return False
        self.opened_at = now
        self.trips += 1
        return True

    @property
    def is_open(self) -> bool:
        return self.opened_at is not None


class ToolResultStore:
    """Whole tool results by ``tool_use_id``, in memory and (with ``directory``) in one file each."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self._texts: dict[str, StoredText] = {}
        self._directory = Path(directory) if directory is not None else None
        if self._directory is not None:
            self._directory.mkdir(parents=True, exist_ok=True)

    def put(self, item: StoredText) -> None:
        """Keep ``item`` (the first text stored under an id wins: later ones are excerpts of it)."""
        if item.tool_use_id in self._texts:
            return
        self._texts[item.tool_use_id] = item
        if self._directory is not None:
            path = self._directory / f"{_SAFE_ID.sub('_', item.tool_use_id)}.txt"
            path.write_text(item.text, encoding="utf-8")

    def get(self, tool_use_id: str) -> StoredText | None:
        return self._texts.get(tool_use_id)

    def items(self) -> list[StoredText]:
        """Every stored result, in the order they were stored (a saved session keeps them)."""
        return list(self._texts.values())

    def __contains__(self, tool_use_id: object) -> bool:
        return tool_use_id in self._texts

    def __len__(self) -> int:
        return len(self._texts)


@dataclass(slots=True)
class ContextSession:
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    store: ToolResultStore = field(default_factory=ToolResultStore)
    learned_limit: int | None = None
    """The lowest prompt limit an upstream stated or implied in this session (new runs start
    from it)."""
    summariser_calls: int = 0
    """Summarisation calls made in this session (every run)."""
    sections: SectionCache = field(default_factory=SectionCache)
    """System-prompt sections computed once per session (``loop.system_prompt``)."""
    reported: tuple[tuple[Message, ...], int, int] | None = None
    """The messages the last run's last API-reported context size covers, that size, and the
    system prompt + tools estimate it went with."""

    def remember_context(self, messages: tuple[Message, ...], tokens: int, overhead: int) -> None:
        """Keep a run's last reported size (``messages`` empty: nothing was reported)."""
        self.reported = (messages, tokens, overhead) if messages else None

    def reported_context(self, messages: tuple[Message, ...], overhead: int) -> tuple[int, int] | None:
        """``(tokens, covered)`` when ``messages`` (a new run's history) starts with the messages the
        last reported size covers and the system prompt and tools are the same size: the new run
        counts from that figure instead of estimating the whole history again (which over-counts
        it by a third)."""
        if self.reported is None:
            return None
        covered, tokens, known_overhead = self.reported
        if known_overhead != overhead or len(messages) < len(covered) or messages[: len(covered)] != covered:
            return None
        return tokens, len(covered)

    def learn_limit(self, limit: int | None) -> None:
        if limit is not None and (self.learned_limit is None or limit < self.learned_limit):
            self.learned_limit = limit
