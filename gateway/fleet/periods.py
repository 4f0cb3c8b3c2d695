"""Spend-cap periods: UTC calendar days, weeks from Monday, and months.

A period is named by its first day (``2026-12-01``) and ends at the first instant of the next one;
that end is the ``reset`` the usage-limit headers and ``GET /api/oauth/usage`` report.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


class Period(enum.StrEnum):
    DAILY = "daily"
    WEEKLY = "weekly"
    MONTHLY = "monthly"


@dataclass(frozen=True, slots=True)
class Window:
    period: Period
    start: datetime
    end: datetime

    @property
    def name(self) -> str:
        """The period's first day, ``YYYY-MM-DD`` (part of its counter key)."""
        return self.start.strftime("%Y-%m-%d")

    @property
    def reset_at(self) -> int:
        """The period's end in Unix seconds."""
        return int(self.end.timestamp())

    def seconds_left(self, now: float) -> int:
        """Whole seconds until the period ends (at least 1)."""
        return max(1, -int(-(self.end.timestamp() - now) // 1))

    def reset_iso(self) -> str:
        return self.end.strftime("%Y-%m-%dT%H:%M:%S.000Z")  # as JavaScript's toISOString


def window(period: Period, now: float) -> Window:
    """The period of kind ``period`` holding the Unix time ``now``."""
    moment = datetime.fromtimestamp(now, UTC)
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if period is Period.DAILY:
        return Window(period, day, day + timedelta(days=1))
    if period is Period.WEEKLY:
        start = day - timedelta(days=day.weekday())  # Monday is weekday 0
        return Window(period, start, start + timedelta(days=7))
    start = day.replace(day=1)
    end = (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else start.replace(month=start.month + 1)
    )
    return Window(period, start, end)
