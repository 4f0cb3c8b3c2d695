"""Model names and beta policy: the client-to-upstream model map, accepted betas, model discovery,
system-message folding (JSON values are text or a path to a JSON file)."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import BeforeValidator, Field

from gateway.config_values import TRUTHY, comma_set, json_or_file
from gateway.provider_names import ProviderName
from gateway.settings.section import Flag, Section


def _fold_targets(value: object) -> object:
    if isinstance(value, str) and value.strip().lower() in TRUTHY:
        return frozenset({"*"})
    return comma_set(value)


class ModelSettings(Section):
    """How client model names and betas become the upstream's."""

    title: ClassVar[str] = "Models and betas"

    model_map: Annotated[dict[str, str], BeforeValidator(json_or_file)] = Field(
        default_factory=dict, alias="GATEWAY_MODEL_MAP"
    )
    """JSON object (or a path to one) mapping client model names to upstream ids."""
    beta_policy: Annotated[dict[ProviderName, list[str]], BeforeValidator(json_or_file)] = Field(
        default_factory=dict, alias="GATEWAY_BETA_POLICY"
    )
    """JSON object `{provider: [betas]}` replacing a provider's accepted `anthropic-beta` list."""
    model_discovery: Flag = Field(False, alias="GATEWAY_MODEL_DISCOVERY")
    """`1`: discover the models the cloud serves from its control plane (Bedrock, Vertex AI)."""
    model_discovery_interval_s: float = Field(3600.0, alias="GATEWAY_MODEL_DISCOVERY_INTERVAL_S", ge=0)
    """Re-read the discovered model catalogue this often, seconds (0: at start-up only)."""
    model_discovery_timeout_s: float = Field(10.0, alias="GATEWAY_MODEL_DISCOVERY_TIMEOUT_S", gt=0)
    """Bound on one model-discovery read, seconds."""
    fold_system_messages: Annotated[frozenset[str], BeforeValidator(_fold_targets)] = Field(
        frozenset(), alias="GATEWAY_FOLD_SYSTEM_MESSAGES"
    )
    """Upstream models that refuse `role: "system"` messages (`*` or fnmatch patterns): folded into user turns."""
