"""Microsoft Foundry upstream settings."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from gateway.settings.section import Credential, OptionalText, OptionalUrl, Section


class FoundrySettings(Section):
    """Resource or endpoint and the key or Entra ID scope (provider ``foundry``)."""

    title: ClassVar[str] = "Microsoft Foundry"

    resource: OptionalText = Field(None, alias="ANTHROPIC_FOUNDRY_RESOURCE")
    """Foundry resource name (or set ANTHROPIC_FOUNDRY_BASE_URL)."""
    base_url: OptionalUrl = Field(None, alias="ANTHROPIC_FOUNDRY_BASE_URL")
    """Foundry base URL ending in `/anthropic` (or set ANTHROPIC_FOUNDRY_RESOURCE)."""
    api_key: Credential = Field(None, alias="ANTHROPIC_FOUNDRY_API_KEY")
    """Foundry key (`x-api-key` and `api-key`); unset: an Entra ID token from azure-identity."""
    entra_scope: str = Field("https://ai.azure.com/.default", alias="GATEWAY_FOUNDRY_ENTRA_SCOPE")
    """Entra ID scope of Foundry tokens."""
