"""Pick the provider for this deployment from the settings snapshot (once, at start-up).

Each provider module is imported only when selected, so an unused provider's SDK is never loaded.
"""

from __future__ import annotations

from gateway.config import Settings
from gateway.providers.base import Provider


def build_provider(settings: Settings) -> Provider:
    from gateway.providers.anthropic import AnthropicProvider

    return AnthropicProvider(settings)
