"""Faults injected by the emulator, driven through the gateway by the real SDK.

Every case must end in a complete message or a well-formed Anthropic error within its bound,
retry and fall back exactly as configured (checked in the emulator's request log), never send a
request again after content was forwarded, and leave no client connection open.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anthropic
import orjson
import pytest

from emulators import EmulatorConfig, run_emulator
from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import RunningServer, running

KEY = "sk-gw"
UPSTREAM_KEY = "sk-up"
MODEL = "claude-sonnet-4-6"
FAST = {
    "GATEWAY_STREAM_IDLE_WARNING_S": "0.15",
    "GATEWAY_STREAM_IDLE_TIMEOUT_S": "0.3",
    "GATEWAY_DOWNSTREAM_PING_S": "0.05",
    "GATEWAY_FIRST_BYTE_TIMEOUT_S": "0.3",
    "GATEWAY_MAX_RETRY_DELAY_S": "0.01",
    "GATEWAY_MAX_RETRIES": "4",
    # these clients do not retry (max_retries=0) but send x-stainless-retry-count like every SDK
    # client: give them the gateway's full budget, which is what is under test here (the shared
    # budget for retrying clients is tested in tests/e2e/test_retry_budget.py)
    "GATEWAY_CLIENT_RETRYING_MAX_RETRIES": "4",
}


@dataclass
class Rig:
    gateway: RunningServer
    emulator: object
    metrics: GatewayMetrics

    @property
    def requests(self) -> list:  # type: ignore[type-arg]
        return self.emulator.requests  # type: ignore[attr-defined, no-any-return]

    def client(self, fault: str, key: str | None = None) -> anthropic.AsyncAnthropic:
        headers = {"x-emulator-fault": fault}
        if key:
            headers["x-emulator-fault-key"] = key
        return anthropic.AsyncAnthropic(
            api_key=KEY, base_url=self.gateway.base_url, max_retries=0, default_headers=headers, timeout=20
        )

    def metric(self, name: str) -> float:
        total = 0.0
        for line in self.metrics.exposition().decode().splitlines():
            if line.startswith(name):
                total += float(line.rsplit(" ", 1)[1])
        return total


async def _rig(**env: str) -> AsyncIterator[Rig]:
    async with run_emulator(EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY}))) as emu:
        settings = Settings.from_environ(
            {
                "GATEWAY_API_KEYS": KEY,
                "ANTHROPIC_API_KEY": UPSTREAM_KEY,
                "ANTHROPIC_BASE_URL": emu.base_url,
                **FAST,
                **env,
            }
        )
        metrics = GatewayMetrics()
        async with running(create_app(settings, metrics=metrics), "127.0.0.1", 0) as gateway:
            rig = Rig(gateway, emu, metrics)
            yield rig
            for _ in range(100):  # connections close asynchronously after the client does
                if gateway.open_connections == 0:
                    break
                await asyncio.sleep(0.01)
            assert gateway.open_connections == 0, "a client connection was left open"


async def stream(client: anthropic.AsyncAnthropic) -> anthropic.types.Message:
    try:
        async with client.messages.stream(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "Tell me a story"}]
        ) as s:
            return await s.get_final_message()
    finally:
        await client.close()


def streamed(rig: Rig) -> list[bool]:
    """For each upstream request: was it a streaming one?"""
    return [orjson.loads(r.body).get("stream") is True for r in rig.requests]


async def test_stall_before_content_falls_back_to_non_streaming() -> None:
    async for rig in _rig():
        started = time.monotonic()
        message = await stream(rig.client("stall_after=2:5", key="a"))
        assert message.stop_reason == "end_turn" and message.content[0].text  # type: ignore[union-attr]
        assert time.monotonic() - started < 3
        assert streamed(rig) == [True, False]  # one stream, then one non-streaming request
        assert rig.metric('gateway_fallbacks_total{kind="non_streaming"') == 1
        assert rig.metric('gateway_stream_idle_total{event="warning"') == 1
        assert rig.metric('gateway_stream_idle_total{event="abort"') == 1


async def test_stall_after_content_ends_with_error_event_and_no_replay() -> None:
    async for rig in _rig():
        with pytest.raises(anthropic.APIStatusError) as info:
            await stream(rig.client("stall_after=4:5"))
        assert info.value.body["error"]["type"] == "api_error"  # type: ignore[index]
        assert "stalled" in info.value.body["error"]["message"]  # type: ignore[index]
        assert streamed(rig) == [True]  # content was forwarded: never sent again


async def test_ping_only_trickle_is_still_a_stall() -> None:
    async for rig in _rig():
        message = await stream(rig.client("trickle=2:0.05:40,first=1", key="t"))
        assert message.stop_reason == "end_turn"
        assert streamed(rig) == [True, False]


async def test_html_200_from_a_proxy_falls_back() -> None:
    async for rig in _rig():
        message = await stream(rig.client("html,first=1", key="h"))
        assert message.stop_reason == "end_turn"
        assert streamed(rig) == [True, False]


@pytest.mark.parametrize(("fault", "replayed"), [("truncate_after=2", True), ("truncate_after=5", False)])
async def test_truncated_stream(fault: str, replayed: bool) -> None:
    async for rig in _rig():
        client = rig.client(fault + ",first=1", key="tr")
        if replayed:
            message = await stream(client)
            assert message.stop_reason == "end_turn"
            assert streamed(rig) == [True, False]
        else:
            with pytest.raises(anthropic.APIStatusError) as info:
                await stream(client)
            assert "message_stop" in info.value.body["error"]["message"]  # type: ignore[index]
            assert streamed(rig) == [True]


async def test_connection_reset_before_answer_is_retried() -> None:
    async for rig in _rig():
        message = await stream(rig.client("reset,first=1", key="r"))
        assert message.stop_reason == "end_turn"
        assert streamed(rig) == [True, True]
        assert (
            rig.metric('gateway_upstream_retries_total{provider="anthropic",reason="connection_error"}') == 1
        )


async def test_connection_reset_mid_stream_after_content() -> None:
    async for rig in _rig():
        with pytest.raises(anthropic.APIStatusError) as info:
            await stream(rig.client("reset_after=5"))
        assert "connection lost" in info.value.body["error"]["message"]  # type: ignore[index]
        assert streamed(rig) == [True]


async def test_overloaded_then_success() -> None:
    async for rig in _rig():
        client = rig.client("fail_first=3:529", key="o")
        raw = await client.messages.with_raw_response.create(
            model=MODEL, max_tokens=32, messages=[{"role": "user", "content": "hi"}]
        )
        await client.close()
        assert raw.status_code == 200 and raw.headers["x-gateway-retries"] == "3"
        assert len(rig.requests) == 4
        assert rig.metric('gateway_upstream_retries_total{provider="anthropic",reason="status_529"}') == 3


async def test_model_fallback_after_consecutive_overloads() -> None:
    async for rig in _rig(GATEWAY_FALLBACK_MODEL="claude-haiku-4-5", GATEWAY_MAX_RETRIES="10"):
        client = rig.client("fail_first=4:529", key="f")
        raw = await client.messages.with_raw_response.create(
            model=MODEL, max_tokens=32, messages=[{"role": "user", "content": "hi"}]
        )
        await client.close()
        assert raw.headers["x-gateway-model-fallback"] == "claude-haiku-4-5"
        models = [orjson.loads(r.body)["model"] for r in rig.requests]
        assert models == [MODEL] * 3 + ["claude-haiku-4-5"] * 2
        assert rig.metric('gateway_fallbacks_total{kind="model"') == 1


async def test_retry_budget_exhausted_relays_the_last_error() -> None:
    async for rig in _rig(GATEWAY_MAX_RETRIES="2"):
        with pytest.raises(anthropic.APIStatusError) as info:
            await stream(rig.client("fail_first=50:529", key="x"))
        assert info.value.status_code == 529
        assert info.value.response.headers["x-gateway-retries"] == "2"
        assert len(rig.requests) == 3


@pytest.mark.parametrize("hint", ["retry_after_ms=20", "retry_after=0.02"])
async def test_rate_limit_with_retry_hints(hint: str) -> None:
    async for rig in _rig(GATEWAY_MAX_RETRY_DELAY_S="5"):
        started = time.monotonic()
        message = await stream(rig.client(f"fail_first=1:429,{hint}", key=hint))
        assert message.stop_reason == "end_turn"
        assert 0.02 <= time.monotonic() - started < 2  # waited what the server asked, not the cap
        assert len(rig.requests) == 2


async def test_expired_static_key_is_not_retried() -> None:
    async for rig in _rig():
        with pytest.raises(anthropic.AuthenticationError):
            await stream(rig.client("unauthorized_once", key="u"))
        assert len(rig.requests) == 1  # a static key cannot be refreshed: no pointless retry


async def test_stall_before_headers_times_out_within_bound() -> None:
    async for rig in _rig(GATEWAY_MAX_RETRIES="1"):
        started = time.monotonic()
        with pytest.raises(anthropic.APIStatusError) as info:
            await stream(rig.client("stall_headers=3"))
        assert info.value.status_code == 504
        assert time.monotonic() - started < 2
        assert len(rig.requests) == 2


async def test_fallback_disabled_reports_error_instead() -> None:
    async for rig in _rig(GATEWAY_NONSTREAMING_FALLBACK="0"):
        with pytest.raises(anthropic.APIStatusError) as info:
            await stream(rig.client("stall_after=2:5"))
        assert info.value.body["error"]["type"] in ("timeout_error", "api_error")  # type: ignore[index]
        assert streamed(rig) == [True]


async def test_downstream_pings_keep_the_client_connection_alive() -> None:
    """While the upstream is silent but not yet stalled, the client receives pings."""
    async for rig in _rig(GATEWAY_STREAM_IDLE_WARNING_S="1", GATEWAY_STREAM_IDLE_TIMEOUT_S="2"):
        import aiohttp

        async with (
            aiohttp.ClientSession() as session,
            session.post(
                rig.gateway.base_url + "/v1/messages",
                headers={
                    "x-api-key": KEY,
                    "anthropic-version": "2023-06-01",
                    "x-emulator-fault": "stall_after=4:0.4",
                },
                json={
                    "model": MODEL,
                    "max_tokens": 32,
                    "stream": True,
                    "messages": [{"role": "user", "content": "x"}],
                },
            ) as response,
        ):
            body = await response.read()
        events = [line for line in body.split(b"\n") if line.startswith(b"event: ")]
        assert events.count(b"event: ping") >= 3  # the upstream's one, plus the gateway's
        assert events[-1] == b"event: message_stop"
