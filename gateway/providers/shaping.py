"""What the gateway does with each ``anthropic-beta`` value on each cloud, and why.

Every :class:`Row` cites its source (a capture, providers.md, AWS docs, a public report); add none
without one. Rows are in the order kept betas are sent (Claude Code's own order).

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gateway.provider_names import ProviderName


class Placement(enum.Enum):
    """Where a kept beta goes."""

    HEADER = "header"
    BODY = "body"  # Bedrock's body ``anthropic_beta`` list
    BOTH = "both"


@dataclass(frozen=True, slots=True)
class Row:
    """One beta on one cloud. ``placement`` ``None``: dropped unless ``GATEWAY_BETA_POLICY`` says
    otherwise."""

    beta: str
    placement: Placement | None
    source: str
    send_as: str | None = None  # the cloud's name for the same feature
    keeps_body_field: bool = False  # dropped, but the cloud takes the paired body field without it
    only_if: Callable[[Mapping[str, Any]], bool] | None = None  # kept only when the body qualifies

    @property
    def upstream_name(self) -> str:
        return self.send_as or self.beta


CLEAR_TOOL_USES: Final = "clear_tool_uses_20250919"


def context_edits_bedrock_takes(payload: Mapping[str, Any]) -> bool:
    """No ``context_management``, or only ``clear_tool_uses`` edits (the AWS guide's "automatic
    tool call clearing"); Claude Code's ``clear_thinking_20251015`` is not one Bedrock takes."""
    value = payload.get("context_management")
    if value is None:
        return True
    edits = value.get("edits") if isinstance(value, dict) else None
    return (
        isinstance(edits, list)
        and bool(edits)
        and all(isinstance(e, dict) and e.get("type") == CLEAR_TOOL_USES for e in edits)
    )


H, B, BOTH = Placement.HEADER, Placement.BODY, Placement.BOTH
CC197_BR = "cc197-bedrock 047/048"
CC197_VX = "cc197-vertex 050/051"
CC332 = "cc332 (providers.md s7)"
NOT_IN_MODE = "not sent in Claude Code's {mode} mode (cc197, cc332)"


def _dropped(beta: str, mode: str, why: str = "", **extra: Any) -> Row:
    source = NOT_IN_MODE.format(mode=mode) + (f"; {why}" if why else "")
    return Row(beta, None, source, **extra)


def _first_party_only(mode: str) -> tuple[Row, ...]:
    """First-party betas Claude Code leaves out in its Bedrock and Vertex modes (body halves: see
    :data:`gateway.providers.betas.BODY_HALVES`)."""
    return (
        _dropped(
            "mid-conversation-system-2026-04-07",
            mode,
            "cc332 sends role:system messages there without it, so they stay",
            keeps_body_field=True,
        ),
        _dropped("per-turn-control-2026-07-01", mode, "its messages[].output_config is removed"),
        _dropped("mid-conversation-tool-changes-2026-07-01", mode),
        _dropped("prompt-caching-scope-2026-01-05", mode, "cache_control.scope is removed"),
        _dropped("redact-thinking-2026-02-12", mode, "first-party interactive only (fixtures README 1.3)"),
        _dropped("structured-outputs-2025-12-15", mode, "output_config.format is removed"),
        _dropped("structured-outputs-2025-11-13", mode, "output_format / output_config.format removed"),
        _dropped("token-counting-2024-11-01", mode, "count_tokens beta of the first-party endpoint"),
        _dropped("request-tags-2026-08-21", mode, "refused with its tags field (gw-protocol)"),
        _dropped(
            "extended-cache-ttl-2025-04-11",
            mode,
            "ttl:'1h' is native there (AWS 2026-01-26 announcement; Google Cloud 'Prompt caching' "
            "for Claude) and stays; Bedrock refused the beta: anthropics/claude-code#56595",
            keeps_body_field=True,
        ),
    )


BEDROCK_ROWS: Final[tuple[Row, ...]] = (
    Row("claude-code-20250219", H, f"{CC197_BR} header; {CC332} header"),
    Row("interleaved-thinking-2025-05-14", B, f"{CC197_BR} body; {CC332} body; aws-betas"),
    Row("context-1m-2025-08-07", B, "aws-betas"),
    Row("tool-search-tool-2025-10-19", B, f"{CC197_BR} body; {CC332} body; aws-betas"),
    Row(
        "advanced-tool-use-2025-11-20",
        B,
        f"{CC332}: the first-party name; Bedrock mode sends tool-search-tool-2025-10-19",
        send_as="tool-search-tool-2025-10-19",
    ),
    Row("thinking-token-count-2026-05-13", BOTH, f"{CC332}: header and body"),
    Row("effort-2025-11-24", H, f"{CC332} header; Claude Code 2.1.197 --model opus header; aws-betas"),
    Row(
        "context-management-2025-06-27",
        B,
        "aws-betas (automatic tool call clearing); any other edit (Claude Code's clear_thinking) "
        "drops the beta and context_management, as Claude Code's Bedrock mode sends neither (cc197, "
        "cc332; providers.md s2: 'context_management: Extra inputs are not permitted')",
        only_if=context_edits_bedrock_takes,
    ),
    Row("computer-use-2024-10-22", B, "aws-betas"),
    Row("computer-use-2025-01-24", B, "aws-betas"),
    Row("token-efficient-tools-2025-02-19", B, "aws-betas"),
    Row("output-128k-2025-02-19", B, "aws-betas"),
    Row("dev-full-thinking-2025-05-14", B, "aws-betas"),
    Row("tool-examples-2025-10-29", B, "aws-betas"),
    _dropped("web-search-2025-03-05", "Bedrock", "only its Vertex mode sends it"),
    *_first_party_only("Bedrock"),
)

VERTEX_ROWS: Final[tuple[Row, ...]] = (
    Row("claude-code-20250219", H, f"{CC197_VX}; {CC332}"),
    Row("interleaved-thinking-2025-05-14", H, f"{CC197_VX}; {CC332}"),
    Row("web-search-2025-03-05", H, f"{CC197_VX}; {CC332}"),
    Row("thinking-token-count-2026-05-13", H, CC332),
    Row("tool-search-tool-2025-10-19", H, CC332),
    Row(
        "advanced-tool-use-2025-11-20",
        H,
        f"{CC332}: the first-party name; Vertex mode sends tool-search-tool-2025-10-19",
        send_as="tool-search-tool-2025-10-19",
    ),
    Row("effort-2025-11-24", H, f"{CC332}; Claude Code 2.1.197 --model opus Vertex mode"),
    Row("context-1m-2025-08-07", H, "Anthropic context-window docs: the 1M beta on Vertex AI"),
    _dropped("context-management-2025-06-27", "Vertex", "context_management is removed"),
    *_first_party_only("Vertex"),
)

TABLES: Final[Mapping[ProviderName, tuple[Row, ...]]] = {
    ProviderName.BEDROCK: BEDROCK_ROWS,
    ProviderName.VERTEX: VERTEX_ROWS,
}

DEFAULT_PLACEMENT: Final[Mapping[ProviderName, Placement]] = {
    ProviderName.BEDROCK: Placement.BODY,  # the AWS guide's place for betas (providers.md s2)
    ProviderName.VERTEX: Placement.HEADER,  # providers.md s3: betas in the header only
}


def rows_by_beta(provider: ProviderName) -> Mapping[str, Row]:
    return {row.beta: row for row in TABLES.get(provider, ())}


def default_accepted(provider: ProviderName) -> frozenset[str] | None:
    """The betas a cloud's table keeps (client names); ``None`` (all) for a first-party surface."""
    rows = TABLES.get(provider)
    if rows is None:
        return None
    return frozenset(row.beta for row in rows if row.placement is not None)
