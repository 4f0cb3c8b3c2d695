"""The ``anthropic-beta`` values the emulator accepts.

The allow-list is the union of the betas real clients were seen sending (Claude Code 2.1.197, the
Python and TypeScript SDKs: see ``tests/fixtures/real-clients/README.md``; Claude Code 2.1.332's
first-party set: ``../shared/design/providers.md`` section 7), commonly used public
betas, and every literal in the installed SDK's ``AnthropicBetaParam``, read at import time.
Anything else is rejected with ``400 Unsupported beta header: <name>``, like the real API, unless
beta checking is disabled in :class:`~emulators.config.EmulatorConfig`.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable

from anthropic.types.anthropic_beta_param import AnthropicBetaParam

OBSERVED_BETAS: frozenset[str] = frozenset(
    {
        # Claude Code 2.1.197 (first-party, Bedrock, Vertex, count_tokens, title generation)
        "claude-code-20250219",
        "context-1m-2025-08-07",
        "interleaved-thinking-2025-05-14",
        "redact-thinking-2026-02-12",
        "thinking-token-count-2026-05-13",
        "context-management-2025-06-27",
        "prompt-caching-scope-2026-01-05",
        "mid-conversation-system-2026-04-07",
        "effort-2025-11-24",
        "structured-outputs-2025-12-15",
        "advanced-tool-use-2025-11-20",
        "extended-cache-ttl-2025-04-11",
        "token-counting-2024-11-01",
        "tool-search-tool-2025-10-19",
        "web-search-2025-03-05",
        "oauth-2025-04-20",
        # Claude Code 2.1.332, first party (providers.md s7): claude-code, interleaved-thinking,
        # context-management, thinking-token-count, advanced-tool-use and effort as above, plus
        "per-turn-control-2026-07-01",
        "mid-conversation-tool-changes-2026-07-01",
    }
)

PER_TURN_CONTROL_BETA = "per-turn-control-2026-07-01"
"""With it, Claude Code 2.1.332 puts ``output_config`` on a message (its ``role: "system"`` ones:
recorded first-party traffic, 2026-12); without it a message key besides ``role``/``content`` is
``Extra inputs are not permitted``."""

COMMON_BETAS: frozenset[str] = frozenset(
    {
        "prompt-caching-2024-07-31",
        "message-batches-2024-09-24",
        "pdfs-2024-09-25",
        "max-tokens-3-5-sonnet-2024-07-15",
        "output-128k-2025-02-19",
        "token-efficient-tools-2025-02-19",
        "files-api-2025-04-14",
        "fine-grained-tool-streaming-2025-05-14",
        "dev-full-thinking-2025-05-14",
        "computer-use-2024-10-22",
        "computer-use-2025-01-24",
        "computer-use-2025-11-24",
        "code-execution-2025-05-22",
        "code-execution-2025-08-25",
        "web-fetch-2025-09-10",
        "search-results-2025-06-09",
        "mcp-client-2025-04-04",
        "mcp-client-2025-11-20",
        "skills-2025-10-02",
        "model-context-window-exceeded-2025-08-26",
        "structured-outputs-2025-11-13",
        "context-management-2025-06-27",
        "tool-examples-2025-10-29",
        "request-tags-2026-08-21",
    }
)


def sdk_betas() -> frozenset[str]:
    """The beta names listed by the installed SDK's ``AnthropicBetaParam``."""
    names: set[str] = set()
    for arg in typing.get_args(AnthropicBetaParam):
        names.update(a for a in typing.get_args(arg) if isinstance(a, str))
    return frozenset(names)


DEFAULT_ALLOWED_BETAS: frozenset[str] = OBSERVED_BETAS | COMMON_BETAS | sdk_betas()


def parse_beta_header(values: Iterable[str]) -> list[str]:
    """Split one or more comma-joined ``anthropic-beta`` header values (spaces tolerated)."""
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def first_unsupported(names: Iterable[str], allowed: frozenset[str]) -> str | None:
    """The first beta not in ``allowed``, or ``None``."""
    return next((name for name in names if name not in allowed), None)
