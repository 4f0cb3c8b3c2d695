"""Cross-field rules of the settings: each raises ``ValueError`` naming the variable to fix.

:meth:`gateway.config.Settings._cross_field_checks` runs them, each only when the fields it reads
validated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway import config_checks

if TYPE_CHECKING:
    from gateway.config import Settings
    from gateway.settings.listener import ListenerSettings
    from gateway.settings.resilience import ResilienceSettings
    from gateway.settings.upstream_egress import EgressSettings


def client_pair(egress: EgressSettings) -> None:
    """A client key needs its certificate, and the pair must load."""
    if egress.client_key is not None and egress.client_cert is None:
        raise ValueError("GATEWAY_CLIENT_KEY: set, but GATEWAY_CLIENT_CERT is not")
    if egress.client_cert is not None:
        config_checks.check_client_pair(egress.client_cert, egress.client_key)


def idle_order(resilience: ResilienceSettings) -> None:
    """The idle warning comes before the idle timeout."""
    if resilience.stream_idle_warning_s > resilience.stream_idle_timeout_s:
        raise ValueError("GATEWAY_STREAM_IDLE_WARNING_S: must not exceed GATEWAY_STREAM_IDLE_TIMEOUT_S")


def drain_order(listener: ListenerSettings) -> None:
    """The drain delay fits in the drain timeout."""
    if listener.drain_delay_s > listener.drain_timeout_s:
        raise ValueError("GATEWAY_DRAIN_DELAY_S: must not exceed GATEWAY_DRAIN_TIMEOUT_S")


def provider_settings(settings: Settings) -> None:
    """What the selected provider cannot do without (a region, a Foundry resource or URL)."""
    provider = settings.provider
    if provider == "bedrock" and settings.bedrock.region is None:
        raise ValueError("AWS_REGION: required when the provider is bedrock (or set AWS_DEFAULT_REGION)")
    if provider == "vertex" and settings.vertex.region is None:
        raise ValueError("CLOUD_ML_REGION: required when the provider is vertex")
    if provider == "foundry":
        if settings.foundry.resource is None and settings.foundry.base_url is None:
            raise ValueError(
                "ANTHROPIC_FOUNDRY_RESOURCE: required when the provider is foundry "
                "(or set ANTHROPIC_FOUNDRY_BASE_URL)"
            )
        if settings.foundry.resource is not None and settings.foundry.base_url is not None:
            raise ValueError(
                "ANTHROPIC_FOUNDRY_RESOURCE: set either it or ANTHROPIC_FOUNDRY_BASE_URL, not both"
            )
