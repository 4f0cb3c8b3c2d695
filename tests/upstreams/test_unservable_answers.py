"""An upstream that answers it cannot serve a request (``501 not_supported``: Bedrock's CountTokens
for an inference-profile model) is not failing: the request goes on to the next candidate, and the
upstream's breaker, health and failure count are left alone, so the sessions it holds stay."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import anthropic
import pytest

from tests.upstreams.harness import SYSTEM, Fleet, four_upstreams

pytestmark = pytest.mark.timeout(60)

PROFILE = "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/emu0profile01"
MODEL = "claude-sonnet-4-5"


def _profile_on_bedrock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sections: dict[str, Any] | None = None
) -> contextlib.AbstractAsyncContextManager[Fleet]:
    """Bedrock (``MODEL`` mapped to an inference profile: its CountTokens answers 501), then Vertex."""
    return four_upstreams(
        tmp_path,
        monkeypatch,
        order=("bedrock", "vertex"),
        providers=("bedrock", "vertex"),
        overrides={"bedrock": {"model_map": {MODEL: PROFILE}}},
        sections=sections,
    )


async def test_count_tokens_not_supported_moves_on_without_tripping_the_breaker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    breaker = {"failures": 3, "window_s": 60, "open_s": 60}
    async with _profile_on_bedrock(tmp_path, monkeypatch, {"breaker": breaker}) as fleet:
        client = fleet.client("profile-session")
        messages: list[anthropic.types.MessageParam] = [{"role": "user", "content": "hello"}]
        await asyncio.wait_for(
            client.messages.create(model=MODEL, max_tokens=16, system=SYSTEM, messages=messages), 20
        )
        assert fleet.served("bedrock") == 1
        for _ in range(5):  # Bedrock answers 501 itself: CountTokens takes no inference profile
            counted = await client.messages.count_tokens(model=MODEL, system=SYSTEM, messages=messages)
            assert counted.input_tokens > 0  # counted by vertex, the next candidate
        assert fleet.metric("gateway_breaker_state", upstream="bedrock") == 0
        assert fleet.metric("gateway_upstream_health", upstream="bedrock") == 1
        assert fleet.failures("bedrock") == 0
        second = await asyncio.wait_for(
            client.messages.create(model=MODEL, max_tokens=16, system=SYSTEM, messages=messages), 20
        )
        assert fleet.served("bedrock") == 2 and fleet.served("vertex") == 0  # the session stayed
        assert (second.usage.cache_read_input_tokens or 0) > 0


async def test_no_candidate_able_to_count_answers_not_supported_not_overloaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _profile_on_bedrock(tmp_path, monkeypatch) as fleet:
        fleet.emulators["vertex"].set_fault("fail_first=1000000:501")
        with pytest.raises(anthropic.APIStatusError) as raised:
            await fleet.client().messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "hi"}])
        assert raised.value.status_code == 501  # the client estimates itself; a 529 would make it retry
        assert raised.value.response.headers["x-should-retry"] == "false"
        assert fleet.failures("bedrock") == fleet.failures("vertex") == 0


async def test_a_probe_model_an_upstream_cannot_serve_does_not_open_its_breaker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no probe.model: the first literal pattern of the routes, "opus" (a Claude Code alias that only
    # the first party is sent as it is; Bedrock and Vertex refuse it before sending)
    route = {"models": ["claude-opus-*", "opus"], "upstreams": ["primary", "bedrock", "vertex"]}
    sections = {"routes": [route], "breaker": {"failures": 2}, "probe": {"interval_s": 0.05}}
    async with four_upstreams(
        tmp_path, monkeypatch, providers=("anthropic", "bedrock", "vertex"), sections=sections
    ) as fleet:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while sum(r.path.endswith("/count_tokens") for r in fleet.emulators["primary"].requests) < 4:
            assert loop.time() < deadline, "the probe never ran"
            await asyncio.sleep(0.05)
        for name in ("primary", "bedrock", "vertex"):
            assert fleet.metric("gateway_breaker_state", upstream=name) == 0, name
            assert fleet.metric("gateway_upstream_health", upstream=name) == 1, name


async def test_a_501_then_a_candidate_refusing_before_sending_answers_not_supported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bedrock answers 501 (an inference profile), the last candidate refuses the model before
    sending: no candidate can serve it, so the 501 is the answer, not a 529 the client retries."""
    async with four_upstreams(
        tmp_path,
        monkeypatch,
        order=("bedrock", "vertex"),
        providers=("bedrock", "vertex"),
        overrides={"bedrock": {"model_map": {"team-sonnet": PROFILE}}},
    ) as fleet:
        with pytest.raises(anthropic.APIStatusError) as raised:
            await fleet.client().messages.count_tokens(model="team-sonnet", messages=[{"role": "user", "content": "hi"}])
        assert raised.value.status_code == 501, raised.value.response.text
        assert raised.value.response.headers["x-should-retry"] == "false"
        assert fleet.failures("bedrock") == fleet.failures("vertex") == 0
