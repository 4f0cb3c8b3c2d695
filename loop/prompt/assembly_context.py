"""What one assembly needs to know about its request: session, upstream, latches, MCP tools, inputs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from gateway.provider_names import ProviderName
from loop.prompt.section_cache import SectionCache

MCP_TOOL_PREFIX: Final = "mcp__"
"""Tools named ``mcp__<server>__<tool>`` come from the user's MCP servers: per-user definitions."""


def tools_include_mcp(tools: Iterable[Mapping[str, Any]] | None) -> bool:
    """Whether a request's ``tools`` include any MCP tool (by the ``mcp__`` name prefix)."""
    return any(
        isinstance(name := tool.get("name"), str) and name.startswith(MCP_TOOL_PREFIX) for tool in tools or ()
    )


@dataclass(frozen=True, slots=True)
class AssemblyContext:
    """The per-request facts :func:`~loop.prompt.assembly.assemble_system` depends on.

    ``provider`` accepts a :class:`~gateway.config.ProviderName` or its value (``"bedrock"``); an
    unknown name is a ``ValueError`` here rather than a silently lost cache scope later.
    ``ttl_1h`` is the session's latched 1-hour TTL eligibility (decided once per session by the
    caller). ``global_scope_eligible`` lets a caller refuse the global scope even on the first-party
    upstream (e.g. a base URL that is not really ``api.anthropic.com``). ``inputs`` are what the
    sections' ``compute`` functions may read.
    """

    session: SectionCache
    provider: ProviderName | str
    ttl_1h: bool = False
    global_scope_eligible: bool = True
    has_mcp_tools: bool = False
    inputs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        try:
            provider = ProviderName(self.provider)
        except ValueError:
            known = ", ".join(p.value for p in ProviderName)
            raise ValueError(f"unknown provider {self.provider!r} (expected one of: {known})") from None
        object.__setattr__(self, "provider", provider)
        if not isinstance(self.session, SectionCache):
            raise TypeError(f"session must be a SectionCache, not {type(self.session).__name__}")

    @property
    def global_scope(self) -> bool:
        """Whether the static part may be cached across organisations (``scope: "global"``).

        Only the first-party upstream accepts the scope, and per-user MCP tool definitions (which
        precede the system prompt in the cache prefix) would fragment a global entry into one per
        user, so their presence turns it off.
        """
        return (
            self.provider is ProviderName.ANTHROPIC and self.global_scope_eligible and not self.has_mcp_tools
        )
