"""The memory budget of the in-memory session store, and the default session bound it gives.

What a session keeps grows with its history (one cumulative hash per message of its last request,
about 77 bytes each), so the budget is stated for a session length: ``GATEWAY_SESSION_MAX``
defaults to the number of sessions of ``BUDGETED_MESSAGES`` messages that fit in
``SESSION_MEMORY_BUDGET``. Measured with ``python -m bench.session_memory`` (tracemalloc
over 20,000 sessions built by the cache pipeline from the captured Claude Code requests; figures in
the README, "Session memory"): the captured three-turn session (six messages) takes about half the
allowance, a 24-message one about 85% of it. ``tests/cache/test_session_memory.py`` measures both
and checks they stay within ``SESSION_BYTES_ALLOWANCE``.
"""

from __future__ import annotations

from typing import Final

SESSION_MEMORY_BUDGET: Final = 64 * 1024 * 1024  # bytes
BUDGETED_MESSAGES: Final = 24  # messages in a session's last request (12 tool turns)
DEFAULT_SESSION_MAX: Final = 20_000
SESSION_BYTES_ALLOWANCE: Final = SESSION_MEMORY_BUDGET // DEFAULT_SESSION_MAX  # 3,355 bytes
