"""The default session bound keeps the in-memory store within its stated memory budget: a session
costs what the budget allows per session (``gateway.cache.budget``), measured here with
``tracemalloc`` the way ``python -m bench.session_memory`` measures it for the README."""

from __future__ import annotations

from bench.session_memory import measure
from gateway.cache.budget import (
    BUDGETED_MESSAGES,
    DEFAULT_SESSION_MAX,
    SESSION_BYTES_ALLOWANCE,
    SESSION_MEMORY_BUDGET,
)
from gateway.config import Settings

SESSIONS = 300  # enough for the per-session figure to settle (the bench uses 20,000)


def test_the_default_bound_is_the_budget_divided_by_the_allowance() -> None:
    assert Settings.from_environ({}).cache.session_max == DEFAULT_SESSION_MAX
    assert DEFAULT_SESSION_MAX * SESSION_BYTES_ALLOWANCE <= SESSION_MEMORY_BUDGET


async def test_the_captured_claude_code_session_fits_the_allowance() -> None:
    result = await measure(SESSIONS)
    assert result.messages == 6 and result.requests_per_session == 3
    assert 0 < result.bytes_per_session <= SESSION_BYTES_ALLOWANCE, result


async def test_a_session_of_the_budgeted_length_fits_the_allowance() -> None:
    result = await measure(SESSIONS, BUDGETED_MESSAGES)
    assert result.messages >= BUDGETED_MESSAGES
    assert 0 < result.bytes_per_session <= SESSION_BYTES_ALLOWANCE, result


async def test_a_longer_history_costs_more_per_session() -> None:
    """The measurement sees what a session keeps (not a constant): history hashes grow with it."""
    short, long = await measure(100, 10), await measure(100, 60)
    assert long.bytes_per_session - short.bytes_per_session > 40 * (long.messages - short.messages)
