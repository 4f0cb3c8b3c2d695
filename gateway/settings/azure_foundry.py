"""Microsoft Foundry upstream settings."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, PrivateAttr, SecretStr

from gateway.settings.section import (
    Credential,
    OptionalText,
    OptionalUrl,
    ReadableFile,
    Section,
    key_or_file,
)


class FoundrySettings(Section):
    """Resource or endpoint and the key or Entra ID scope (provider ``foundry``)."""

    title: ClassVar[str] = "Microsoft Foundry"

    resource: OptionalText = Field(None, alias="ANTHROPIC_FOUNDRY_RESOURCE")
    """Foundry resource name (or set ANTHROPIC_FOUNDRY_BASE_URL)."""
    base_url: OptionalUrl = Field(None, alias="ANTHROPIC_FOUNDRY_BASE_URL")
    """Foundry base URL ending in `/anthropic` (or set ANTHROPIC_FOUNDRY_RESOURCE)."""
    api_key: Credential = Field(None, alias="ANTHROPIC_FOUNDRY_API_KEY")
    """Foundry key (`x-api-key` and `api-key`); unset: an Entra ID token from azure-identity."""
    api_key_file: ReadableFile = Field(None, alias="GATEWAY_FOUNDRY_API_KEY_FILE")
    """File holding the Foundry key instead (one line, read at start-up, re-read when Foundry refuses the key and on SIGHUP; one per upstream in GATEWAY_UPSTREAMS_FILE)."""
    entra_scope: str = Field("https://ai.azure.com/.default", alias="GATEWAY_FOUNDRY_ENTRA_SCOPE")
    """Entra ID scope of Foundry tokens."""

    _file_key: SecretStr | None = PrivateAttr(None)  # GATEWAY_FOUNDRY_API_KEY_FILE's key, once read

    @property
    def key(self) -> SecretStr | None:
        """The Foundry key: ANTHROPIC_FOUNDRY_API_KEY, else the one read from its file."""
        return self.api_key or self._file_key

    def load_key_file(self) -> None:
        """Read GATEWAY_FOUNDRY_API_KEY_FILE once (a cross-field check of the settings)."""
        self._file_key = key_or_file(
            self.api_key, self.api_key_file, "ANTHROPIC_FOUNDRY_API_KEY", "GATEWAY_FOUNDRY_API_KEY_FILE"
        )
