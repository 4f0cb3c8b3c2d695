"""Bedrock-specific emulator options and the per-app Bedrock state.

The generic behaviour (scenarios, cache, token rule, clock, catalogue) comes from the shared
:class:`~emulators.config.EmulatorConfig`; what only Bedrock has is here and is passed as
``create_app(config, BedrockOptions(...))``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from aiohttp import web

from .sts import CredentialIssuer

DEFAULT_REGION: Final = "us-east-1"
DEFAULT_ACCESS_KEY_ID: Final = "AKIDEXAMPLE"
DEFAULT_SECRET_ACCESS_KEY: Final = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
DEFAULT_API_KEY: Final = "bedrock-api-key-emu"
DEFAULT_WEB_IDENTITY_TOKEN: Final = "emu-web-identity-token"
DEFAULT_CONTAINER_TOKEN: Final = "emu-container-authorization-token"
DEFAULT_PROFILE_ARN: Final = (
    "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/emu0profile01"
)


@dataclass(frozen=True)
class BedrockOptions:
    """What the Bedrock emulator accepts and how it answers."""

    region: str = DEFAULT_REGION
    """The SigV4 credential-scope region requests must be signed for."""
    credentials: Mapping[str, str] = field(
        default_factory=lambda: {DEFAULT_ACCESS_KEY_ID: DEFAULT_SECRET_ACCESS_KEY}
    )
    """Long-term keys: access key id -> secret access key."""
    api_keys: frozenset[str] = frozenset({DEFAULT_API_KEY})
    """Bedrock API keys accepted as ``Authorization: Bearer``."""
    web_identity_tokens: frozenset[str] = frozenset({DEFAULT_WEB_IDENTITY_TOKEN})
    """Tokens the STS endpoint accepts for ``AssumeRoleWithWebIdentity``."""
    container_token: str | None = DEFAULT_CONTAINER_TOKEN
    """``Authorization`` value the container-credentials endpoint requires (``None``: any)."""
    issued_lifetime_s: float = 3600.0
    """Lifetime of STS / container credentials, on the emulator's clock."""
    inference_profiles: Mapping[str, str] = field(
        default_factory=lambda: {DEFAULT_PROFILE_ARN: "claude-sonnet-4-5-20250929"}
    )
    """Application inference profile ARNs -> the catalogue model they route to."""
    stream_exception: str = "modelStreamErrorException"
    """Exception frame sent by the ``stream_error`` scenario (``x-emulator-stream-exception`` overrides)."""
    max_clock_skew_s: float | None = None
    """Reject ``X-Amz-Date`` further than this from the emulator's clock (``None``: no check)."""


@dataclass(slots=True)
class BedrockState:
    options: BedrockOptions  # replaced only by ``accept_bedrock_api_keys``; read by every request
    issuer: CredentialIssuer


BEDROCK_STATE_KEY: web.AppKey[BedrockState] = web.AppKey("bedrock_state", BedrockState)


def get_bedrock_state(app: web.Application) -> BedrockState:
    """The Bedrock state (options, issued credentials) of an app made by ``bedrock.create_app``."""
    return app[BEDROCK_STATE_KEY]


def accept_bedrock_api_keys(app: web.Application, api_keys: frozenset[str]) -> None:
    """Accept these Bedrock API keys from the next request on, and no other (a key revoked and a
    new one generated in the console)."""
    state = get_bedrock_state(app)
    state.options = replace(state.options, api_keys=api_keys)
