"""AWS Bedrock upstream settings (the credential chain itself is botocore's: env keys, profile,
web identity...)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import AliasChoices, Field, PrivateAttr, SecretStr

from gateway.settings.section import (
    Credential,
    OptionalText,
    OptionalUrl,
    ReadableFile,
    Section,
    key_or_file,
)


class BedrockSettings(Section):
    """Region, endpoints and the API-key alternative to SigV4 (provider ``bedrock``)."""

    title: ClassVar[str] = "AWS Bedrock (credentials: the standard AWS chain, read by botocore)"

    region: OptionalText = Field(None, validation_alias=AliasChoices("AWS_REGION", "AWS_DEFAULT_REGION"))
    """Bedrock region (required for bedrock)."""
    profile: OptionalText = Field(None, alias="AWS_PROFILE")
    """AWS shared-config profile the credential chain uses."""
    bearer_token: Credential = Field(None, alias="AWS_BEARER_TOKEN_BEDROCK")
    """Bedrock API key (`Authorization: Bearer`, no SigV4)."""
    bearer_token_file: ReadableFile = Field(None, alias="GATEWAY_BEDROCK_BEARER_TOKEN_FILE")
    """File holding a Bedrock API key (as AWS_BEARER_TOKEN_BEDROCK, read at start-up, re-read when Bedrock refuses the key and on SIGHUP; one per upstream in GATEWAY_UPSTREAMS_FILE)."""
    config_file: OptionalText = Field(None, alias="AWS_CONFIG_FILE")
    """AWS shared config file the credential chain reads (unset: botocore's `~/.aws/config`)."""
    credentials_file: OptionalText = Field(None, alias="AWS_SHARED_CREDENTIALS_FILE")
    """AWS shared credentials file the credential chain reads (unset: `~/.aws/credentials`)."""
    base_url: OptionalUrl = Field(None, alias="ANTHROPIC_BEDROCK_BASE_URL")
    """Bedrock runtime endpoint (unset: `https://bedrock-runtime.{region}.amazonaws.com`)."""
    profile_prefix: OptionalText = Field(None, alias="GATEWAY_BEDROCK_PROFILE_PREFIX")
    """Cross-region inference-profile prefix of mapped ids (unset: from the region; `none`: base ids)."""
    control_url: OptionalUrl = Field(None, alias="GATEWAY_BEDROCK_CONTROL_URL")
    """Bedrock control-plane URL for model discovery (default `https://bedrock.{AWS_REGION}.amazonaws.com`)."""

    _file_token: SecretStr | None = PrivateAttr(None)  # GATEWAY_BEDROCK_BEARER_TOKEN_FILE's key, once read

    @property
    def api_key(self) -> SecretStr | None:
        """The Bedrock API key: AWS_BEARER_TOKEN_BEDROCK, else the one read from its file."""
        return self.bearer_token or self._file_token

    def load_token_file(self) -> None:
        """Read GATEWAY_BEDROCK_BEARER_TOKEN_FILE once (a cross-field check of the settings)."""
        self._file_token = key_or_file(
            self.bearer_token,
            self.bearer_token_file,
            "AWS_BEARER_TOKEN_BEDROCK",
            "GATEWAY_BEDROCK_BEARER_TOKEN_FILE",
        )
