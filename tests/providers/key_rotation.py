"""The client side of the upstream key-rotation tests (Foundry and Bedrock key files, Vertex's
credentials file): an SDK client of an in-process gateway, and that gateway's metrics."""

from __future__ import annotations

import anthropic

from gateway.metrics import GatewayMetrics

MODEL = "claude-sonnet-4-5"
MESSAGES: list[anthropic.types.MessageParam] = [{"role": "user", "content": "hi"}]


class KeyRotationGateway:
    """A gateway in this event loop, its metrics, and an SDK client (no SDK retries)."""

    def __init__(self, client: anthropic.AsyncAnthropic, metrics: GatewayMetrics, provider: str) -> None:
        self.client = client
        self.metrics = metrics
        self.provider = provider

    async def ask(self) -> tuple[int, str]:
        """Status and ``x-gateway-retries`` of one Messages request."""
        try:
            raw = await self.client.messages.with_raw_response.create(
                model=MODEL, max_tokens=8, messages=MESSAGES
            )
        except anthropic.APIStatusError as exc:
            return exc.status_code, exc.response.headers.get("x-gateway-retries", "")
        assert (await raw.parse()).content
        return raw.status_code, raw.headers["x-gateway-retries"]

    def credential_retries(self) -> float:
        """``gateway_upstream_retries_total{reason="credential_refresh"}`` of this provider."""
        value = self.metrics.registry.get_sample_value(
            "gateway_upstream_retries_total", {"provider": self.provider, "reason": "credential_refresh"}
        )
        return value or 0.0
