"""Pick the provider for this deployment from the settings snapshot (once, at start-up).

Each provider module is imported only when selected, so an unused provider's SDK (botocore,
google-auth, azure-identity) is never loaded.
"""

from __future__ import annotations

import importlib.util

from gateway.config import ConfigError, Settings
from gateway.provider_names import ProviderName
from gateway.providers.base import Provider

# The SDK a cloud provider cannot start without, and the extra that installs it (the image's
# PROVIDERS build arg). Foundry checks its own (azure-identity, only needed without an API key).
REQUIRED_SDK = {ProviderName.BEDROCK: "botocore", ProviderName.VERTEX: "google.auth"}


def require_sdk(provider: ProviderName) -> None:
    """One clear configuration error, instead of an ImportError traceback, when this installation
    (e.g. an image built for other providers) lacks the selected provider's SDK."""
    module = REQUIRED_SDK.get(provider)
    if module is None:
        return
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing too
        found = False
    if not found:
        raise ConfigError(
            f"GATEWAY_PROVIDER: {provider.value} needs the {module} package, which this installation "
            f"lacks: pip install 'switchyard[{provider.value}]', or build the image with "
            f"--build-arg PROVIDERS={provider.value} (or all)"
        )


def build_provider(settings: Settings) -> Provider:
    provider = settings.provider
    require_sdk(provider)
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
