"""The upstream providers' names (``GATEWAY_PROVIDER``): a leaf module, importable from anywhere
(the settings, the price table and the model tables) without an import cycle."""

from __future__ import annotations

import enum


class ProviderName(enum.StrEnum):
    ANTHROPIC = "anthropic"
    BEDROCK = "bedrock"
    VERTEX = "vertex"
    FOUNDRY = "foundry"
