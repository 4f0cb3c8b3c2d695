"""First-party (Anthropic API) upstream settings."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, SecretStr, field_validator

from gateway import config_checks
from gateway.config_values import http_url
from gateway.settings.section import Credential, Section


class AnthropicSettings(Section):
    """The first-party API's endpoint and credential (provider ``anthropic``)."""

    title: ClassVar[str] = "First-party upstream (provider anthropic)"

    api_key: Credential = Field(None, alias="ANTHROPIC_API_KEY")
    """First-party API key (sent as `x-api-key`)."""
    auth_token: Credential = Field(None, alias="ANTHROPIC_AUTH_TOKEN")
    """First-party bearer token (sent as `Authorization: Bearer`)."""
    base_url: str = Field("https://api.anthropic.com", alias="ANTHROPIC_BASE_URL")
    """First-party base URL."""

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str) -> str:
        return config_checks.without_userinfo(http_url(value))  # never sent upstream (nor logged)

    @property
    def credential(self) -> SecretStr | None:
        """The key, else the bearer token."""
        return self.api_key or self.auth_token
