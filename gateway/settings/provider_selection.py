"""Which upstream this deployment targets: GATEWAY_PROVIDER, else the Claude Code switches."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import BeforeValidator, Field

from gateway.config_values import blank_is_none
from gateway.provider_names import ProviderName
from gateway.settings.section import Flag, ReadableFile, Section


class ProviderSelection(Section):
    """The provider choice; :attr:`provider` resolves it once."""

    title: ClassVar[str] = "Provider selection"

    provider_choice: Annotated[ProviderName | None, BeforeValidator(blank_is_none)] = Field(
        None, alias="GATEWAY_PROVIDER"
    )
    """Upstream: `anthropic`, `bedrock`, `vertex` or `foundry` (unset: the CLAUDE_CODE_USE_* switches)."""
    use_bedrock: Flag = Field(False, alias="CLAUDE_CODE_USE_BEDROCK")
    """`1`: Bedrock is the upstream (when GATEWAY_PROVIDER is unset)."""
    use_vertex: Flag = Field(False, alias="CLAUDE_CODE_USE_VERTEX")
    """`1`: Vertex AI is the upstream (when GATEWAY_PROVIDER is unset)."""
    use_foundry: Flag = Field(False, alias="CLAUDE_CODE_USE_FOUNDRY")
    """`1`: Foundry is the upstream (when GATEWAY_PROVIDER is unset)."""
    upstreams_file: ReadableFile = Field(None, alias="GATEWAY_UPSTREAMS_FILE")
    """YAML or JSON file of several named upstreams and their routes (failover, session affinity, breakers); unset: the single upstream above."""
    upstream_header: Flag = Field(False, alias="GATEWAY_UPSTREAM_HEADER")
    """`1`: responses name the upstream that answered in `x-gateway-upstream` (debugging; several upstreams only)."""

    @property
    def provider(self) -> ProviderName:
        """The upstream this deployment targets, in this order: GATEWAY_PROVIDER, Bedrock, Vertex,
        Foundry switches, else the first-party API."""
        if self.provider_choice is not None:
            return self.provider_choice
        if self.use_bedrock:
            return ProviderName.BEDROCK
        if self.use_vertex:
            return ProviderName.VERTEX
        if self.use_foundry:
            return ProviderName.FOUNDRY
        return ProviderName.ANTHROPIC
