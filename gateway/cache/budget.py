"""The memory budget of the in-memory session store, and the default session bound it gives.

``GATEWAY_SESSION_MAX`` defaults to the number of realistic sessions that fit in
``SESSION_MEMORY_BUDGET``: a session replaying the captured Claude Code session (fixtures 015-017:
three turns, latches, prefix hashes of six messages, its break history) was measured with
``python -m gateway.bench.session_memory`` (tracemalloc over 20,000 sessions, README "Session
memory"). ``SESSION_BYTES_ALLOWANCE`` is what each may cost for the default to stay within the
budget; ``tests/cache/test_session_memory.py`` measures a session and checks it does.
"""

from __future__ import annotations

from typing import Final

SESSION_MEMORY_BUDGET: Final = 64 * 1024 * 1024  # bytes
DEFAULT_SESSION_MAX: Final = 32_000
SESSION_BYTES_ALLOWANCE: Final = SESSION_MEMORY_BUDGET // DEFAULT_SESSION_MAX
