"""Pick the provider for this deployment from the settings snapshot (once, at start-up).

Each provider module is imported only when selected, so an unused provider's SDK (botocore,
google-auth, azure-identity) is never loaded.
"""

from __future__ import annotations

from gateway.config import ProviderName, Settings
from gateway.providers.base import Provider


def build_provider(settings: Settings) -> Provider:
    provider = settings.provider
    if provider is ProviderName.BEDROCK:
        from gateway.providers.bedrock import BedrockProvider

        return BedrockProvider(settings)
    if provider is ProviderName.VERTEX:
        from gateway.providers.vertex import VertexProvider

        return VertexProvider(settings)
    if provider is ProviderName.FOUNDRY:
        from gateway.providers.foundry import FoundryProvider

        return FoundryProvider(settings)
    from gateway.providers.anthropic import AnthropicProvider

    return AnthropicProvider(settings)
