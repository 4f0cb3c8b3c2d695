"""A persistent 529 through the gateway: the real SDK's retries and the gateway's share one budget.

The emulator answers every request with 529 (``retry_after_ms`` keeps the waits short); the
upstream attempts are counted in its request log.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import anthropic
import pytest

from emulators import EmulatorConfig, run_emulator
from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import running

KEY = "sk-gw"
UPSTREAM_KEY = "sk-up"
MODEL = "claude-sonnet-4-5"
USER = [{"role": "user", "content": "hi"}]


class Rig:
    def __init__(self, emulator: object, gateway_url: str, metrics: GatewayMetrics) -> None:
        self.emulator = emulator
        self.url = gateway_url
        self.metrics = metrics

    @property
    def retry_counts(self) -> list[str | None]:
        """The client's x-stainless-retry-count as the upstream saw it, one per upstream attempt."""
        return [r.header("x-stainless-retry-count") for r in self.emulator.requests]  # type: ignore[attr-defined]

    def metric(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


async def _rig(scenario: str = "error:529", **env: str) -> AsyncIterator[Rig]:
    config = EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY}), default_scenario=scenario, retry_after_ms=1)
    async with run_emulator(config) as emu:
        settings = Settings.from_environ(
            {
                "GATEWAY_API_KEYS": KEY,
                "ANTHROPIC_API_KEY": UPSTREAM_KEY,
                "ANTHROPIC_BASE_URL": emu.base_url,
                **env,
            }
        )
        metrics = GatewayMetrics()
        async with running(create_app(settings, metrics=metrics), "127.0.0.1", 0) as gateway:
            yield Rig(emu, gateway.base_url, metrics)


async def _create(rig: Rig, max_retries: int, **kwargs: object) -> anthropic.APIStatusError:
    client = anthropic.AsyncAnthropic(api_key=KEY, base_url=rig.url, max_retries=max_retries, **kwargs)  # type: ignore[arg-type]
    try:
        with pytest.raises(anthropic.APIStatusError) as info:
            await client.messages.create(model=MODEL, max_tokens=8, messages=USER)  # type: ignore[arg-type]
    finally:
        await client.close()
    return info.value


async def test_sdk_default_retries_cost_at_most_six_upstream_attempts() -> None:
    """Before the budget: 33 attempts (10 gateway retries under each of the SDK's 3 attempts)."""
    async for rig in _rig():  # the gateway's defaults: GATEWAY_MAX_RETRIES=10
        error = await _create(rig, max_retries=2)
        assert error.status_code == 529 and isinstance(error, anthropic.OverloadedError)
        assert len(rig.retry_counts) <= 6
        assert rig.retry_counts == ["0", "0", "1", "2"]  # one gateway retry, under the first attempt only
        headers = error.response.headers
        assert headers["x-should-retry"] == "true"  # its third attempt is within the retry limit
        assert (
            headers["retry-after-ms"] == "1" and headers["retry-after"] == "1"
        )  # the upstream's, and whole s
        assert headers["x-gateway-retries"] == "0"  # the client's last attempt had no gateway retry
        assert rig.metric("gateway_upstream_retries_total", provider="anthropic", reason="status_529") == 1
        labels = {"provider": "anthropic", "stop": "budget", "should_retry": "true"}
        assert rig.metric("gateway_retry_final_errors_total", **labels) == 3


async def test_sdk_is_told_to_stop_at_the_client_retry_limit() -> None:
    async for rig in _rig(GATEWAY_CLIENT_RETRY_LIMIT="1"):
        error = await _create(rig, max_retries=5)
        assert error.status_code == 529
        assert error.response.headers["x-should-retry"] == "false"
        assert rig.retry_counts == ["0", "0", "1"]  # the SDK honoured it: no third attempt


async def test_a_blip_is_absorbed_before_the_sdk_sees_it() -> None:
    async for rig in _rig(scenario="text"):
        client = anthropic.AsyncAnthropic(
            api_key=KEY,
            base_url=rig.url,
            max_retries=2,
            default_headers={
                "x-emulator-fault": "fail_first=1:529,retry_after_ms=1",
                "x-emulator-fault-key": "b",
            },
        )
        raw = await client.messages.with_raw_response.create(model=MODEL, max_tokens=8, messages=USER)  # type: ignore[arg-type]
        await client.close()
        assert raw.status_code == 200 and raw.headers["x-gateway-retries"] == "1"
        assert rig.retry_counts == ["0", "0"]  # the client made one attempt; the gateway forwarded its header


async def test_rate_limit_hint_is_relayed_with_the_advice() -> None:
    async for rig in _rig(scenario="error:429"):
        error = await _create(rig, max_retries=0)
        assert error.status_code == 429
        headers = error.response.headers
        assert headers["retry-after"] == "1" and headers["retry-after-ms"] == "1"  # the emulator's own
        assert headers["x-should-retry"] == "true"
        assert len(rig.retry_counts) == 2


async def test_plain_http_client_gets_the_full_budget_then_a_stop() -> None:
    """No x-stainless-retry-count: GATEWAY_MAX_RETRIES applies, and the client is told not to stack."""
    async for rig in _rig(GATEWAY_MAX_RETRIES="3"):
        async with aiohttp.ClientSession() as session:
            for _ in range(2):  # the second one ignores the advice: it is recognised as a retry
                async with session.post(
                    f"{rig.url}/v1/messages",
                    json={"model": MODEL, "max_tokens": 8, "messages": USER},
                    headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
                ) as response:
                    assert response.status == 529
                    assert response.headers["x-should-retry"] == "false"
                    assert response.headers["retry-after"] == "1"
        assert rig.retry_counts == [None] * 4 + [None]  # 1 + 3 gateway retries, then 1 for the repeat
