"""The ``anthropic-beta`` sets Claude Code itself sends, per version and mode, with their sources.

Facts the tests compare against (never the gateway's own tables):

* 2.1.332: ``../shared/design/providers.md`` section 7 (first request of ``claude -p``, default model);
* 2.1.197: ``tests/fixtures/real-clients/README.md`` section 1.3 (first party, opus-4-8) and the
  Bedrock/Vertex-mode captures 047/048 and 050/051.
"""

from __future__ import annotations

from typing import Final

CC332_FIRST_PARTY: Final = (
    "claude-code-20250219",
    "interleaved-thinking-2025-05-14",
    "context-management-2025-06-27",
    "per-turn-control-2026-07-01",
    "mid-conversation-tool-changes-2026-07-01",
    "thinking-token-count-2026-05-13",
    "advanced-tool-use-2025-11-20",
    "effort-2025-11-24",
)
CC197_OPUS_FIRST_PARTY: Final = (
    "claude-code-20250219",
    "context-1m-2025-08-07",
    "interleaved-thinking-2025-05-14",
    "thinking-token-count-2026-05-13",
    "context-management-2025-06-27",
    "prompt-caching-scope-2026-01-05",
    "mid-conversation-system-2026-04-07",
    "effort-2025-11-24",
)
CC332_BEDROCK_HEADER: Final = ("claude-code-20250219", "thinking-token-count-2026-05-13", "effort-2025-11-24")
CC332_BEDROCK_BODY: Final = (
    "interleaved-thinking-2025-05-14",
    "tool-search-tool-2025-10-19",
    "thinking-token-count-2026-05-13",
)
CC332_VERTEX_HEADER: Final = (
    "claude-code-20250219",
    "interleaved-thinking-2025-05-14",
    "web-search-2025-03-05",
    "thinking-token-count-2026-05-13",
    "tool-search-tool-2025-10-19",
    "effort-2025-11-24",
)
