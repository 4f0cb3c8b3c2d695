"""AWS Bedrock upstream settings (the credential chain itself is botocore's: env keys, profile,
web identity...)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import AliasChoices, Field

from gateway.settings.section import Credential, OptionalText, OptionalUrl, Section


class BedrockSettings(Section):
    """Region, endpoints and the API-key alternative to SigV4 (provider ``bedrock``)."""

    title: ClassVar[str] = "AWS Bedrock (credentials: the standard AWS chain, read by botocore)"

    region: OptionalText = Field(None, validation_alias=AliasChoices("AWS_REGION", "AWS_DEFAULT_REGION"))
    """Bedrock region (required for bedrock)."""
    profile: OptionalText = Field(None, alias="AWS_PROFILE")
    """AWS shared-config profile the credential chain uses."""
    bearer_token: Credential = Field(None, alias="AWS_BEARER_TOKEN_BEDROCK")
    """Bedrock API key (`Authorization: Bearer`, no SigV4)."""
    base_url: OptionalUrl = Field(None, alias="ANTHROPIC_BEDROCK_BASE_URL")
    """Bedrock runtime endpoint (unset: `https://bedrock-runtime.{region}.amazonaws.com`)."""
    profile_prefix: OptionalText = Field(None, alias="GATEWAY_BEDROCK_PROFILE_PREFIX")
    """Cross-region inference-profile prefix of mapped ids (unset: from the region; `none`: base ids)."""
    control_url: OptionalUrl = Field(None, alias="GATEWAY_BEDROCK_CONTROL_URL")
    """Bedrock control-plane URL for model discovery (default `https://bedrock.{AWS_REGION}.amazonaws.com`)."""
