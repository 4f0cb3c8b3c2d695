"""The ``anthropic-beta`` values the Bedrock and Vertex emulators accept, from the clouds' own sources.

These lists are the emulators' own, written from ``../shared/design/providers.md`` (cited as
``providers.md:LINE``), what the clouds publish, and what Claude Code sends each cloud in its own
provider mode (the client that knows each cloud best); they are not the gateway's table, which the
emulators exist to test. Anything else is refused the way the cloud refuses it.

Bedrock (InvokeModel, CountTokens' inner body), a beta outside these lists is a 400
``ValidationException`` ``invalid beta flag`` (the wording users report: anthropics/claude-code
#49370, #56595; BerriAI/litellm#19875):

* body ``anthropic_beta``: the AWS Bedrock user guide's list for Claude ("Anthropic Claude Messages
  API", ``anthropic_beta``; quoted in BerriAI/litellm#19877; its example body is
  providers.md:111), plus the body column of Claude Code 2.1.332's Bedrock mode (providers.md:312)
  and 2.1.197's (``tests/fixtures/real-clients/047``/``048``);
* ``anthropic-beta`` header: the header column of Claude Code's Bedrock mode (providers.md:312;
  047/048), plus every body beta: the official SDK's ``AnthropicBedrock`` keeps the per-request
  header and also copies it into the body (providers.md:106).

Vertex (``:rawPredict`` / ``:streamRawPredict``, header only, providers.md:187; an unknown beta is
the model server's 400 ``Unsupported beta header: <name>``, as first party, providers.md:226):
the header column of Claude Code 2.1.332's Vertex mode (providers.md:313) and 2.1.197's
(``050``/``051``, and ``effort`` with ``--model opus``), plus ``context-1m-2025-08-07``
(Anthropic's context-window docs name Vertex AI for the 1M beta). ``request-tags-2026-08-21`` is
refused on both (providers.md:406).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

AWS_DOCUMENTED_BETAS: Final = frozenset(
    {
        "computer-use-2024-10-22",  # also the AWS doc's example body (providers.md:111)
        "computer-use-2025-01-24",
        "token-efficient-tools-2025-02-19",
        "interleaved-thinking-2025-05-14",
        "output-128k-2025-02-19",
        "dev-full-thinking-2025-05-14",
        "context-1m-2025-08-07",
        "context-management-2025-06-27",
        "effort-2025-11-24",
        "tool-search-tool-2025-10-19",
        "tool-examples-2025-10-29",
    }
)

CLAUDE_CODE_BEDROCK_BODY: Final = frozenset(
    {
        "interleaved-thinking-2025-05-14",  # 2.1.197 and 2.1.332 (providers.md:312, body)
        "tool-search-tool-2025-10-19",  # 2.1.197 and 2.1.332 (providers.md:312, body)
        "thinking-token-count-2026-05-13",  # 2.1.332 (providers.md:312, body and header)
    }
)

CLAUDE_CODE_BEDROCK_HEADER: Final = frozenset(
    {
        "claude-code-20250219",  # 2.1.197 and 2.1.332 (providers.md:312, header)
        "thinking-token-count-2026-05-13",  # 2.1.332 (providers.md:312, header)
        "effort-2025-11-24",  # 2.1.332 (providers.md:312, header); 2.1.197 with --model opus
    }
)

BEDROCK_BODY_BETAS: Final = AWS_DOCUMENTED_BETAS | CLAUDE_CODE_BEDROCK_BODY
BEDROCK_HEADER_BETAS: Final = CLAUDE_CODE_BEDROCK_HEADER | BEDROCK_BODY_BETAS

VERTEX_BETAS: Final = frozenset(
    {
        # the header column of providers.md:313 (2.1.332), and 2.1.197's captures 050/051
        "claude-code-20250219",  # 2.1.197 and 2.1.332
        "interleaved-thinking-2025-05-14",  # 2.1.197 and 2.1.332
        "web-search-2025-03-05",  # 2.1.197 and 2.1.332
        "effort-2025-11-24",  # 2.1.197 (--model opus) and 2.1.332
        "thinking-token-count-2026-05-13",  # 2.1.332
        "tool-search-tool-2025-10-19",  # 2.1.332
        "context-1m-2025-08-07",  # Anthropic context-window docs (not in providers.md)
    }
)

CONTEXT_MANAGEMENT_BETA: Final = "context-management-2025-06-27"
CLEAR_TOOL_USES: Final = "clear_tool_uses_20250919"


def first_outside(names: Iterable[str], accepted: frozenset[str]) -> str | None:
    return next((name for name in names if name not in accepted), None)


def bedrock_context_edits_ok(value: object, body_betas: Iterable[str]) -> bool:
    """Bedrock takes ``context_management`` only with its beta in the body list and only for the
    AWS guide's "automatic tool call clearing" (``clear_tool_uses_20250919`` edits). Without the
    beta it is ``context_management: Extra inputs are not permitted`` (providers.md:165, quoting
    issue reports; anthropic-sdk-go#246). The same answer for another edit type (Claude Code's
    ``clear_thinking_20251015``, which its Bedrock mode never sends) is [UNVERIFIED] wording."""
    if CONTEXT_MANAGEMENT_BETA not in body_betas or not isinstance(value, dict):
        return False
    edits = value.get("edits")
    return (
        isinstance(edits, list)
        and bool(edits)
        and all(isinstance(e, dict) and e.get("type") == CLEAR_TOOL_USES for e in edits)
    )
