"""Fault tests over four emulated upstreams at once: first party (primary), Bedrock, Vertex AI and
Foundry. Every request gets an answer (lost 0, hung 0); sessions move once and stay; breakers open
and half-open; every candidate unavailable is ``529 overloaded_error`` with ``retry-after``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any, cast

import anthropic
import pytest

from tests.upstreams.harness import MODEL, SYSTEM, Fleet, four_upstreams

pytestmark = pytest.mark.timeout(60)


async def _turn(
    client: anthropic.AsyncAnthropic, text: str, *, stream: bool = False
) -> anthropic.types.Message:
    messages: list[anthropic.types.MessageParam] = [{"role": "user", "content": text}]
    if stream:
        async with client.messages.stream(model=MODEL, max_tokens=32, system=SYSTEM, messages=messages) as s:
            return await asyncio.wait_for(s.get_final_message(), 20)
    return await asyncio.wait_for(
        client.messages.create(model=MODEL, max_tokens=32, system=SYSTEM, messages=messages), 20
    )


def _clocked(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    clock: Clock,
    breaker: dict[str, Any],
    providers: tuple[str, ...] = ("anthropic", "bedrock", "vertex", "foundry"),
    **sections: Any,
) -> contextlib.AbstractAsyncContextManager[Fleet]:
    """Upstreams on ``clock`` with this breaker and no same-upstream retries."""
    return four_upstreams(
        tmp_path,
        monkeypatch,
        sections={"failover": {"same_upstream_retries": 0}, "breaker": breaker, **sections},
        providers=providers,
        app_kwargs={"wall_clock": clock},
    )


async def test_all_four_serve_in_route_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with four_upstreams(tmp_path, monkeypatch) as fleet:
        message = await _turn(fleet.client("s-1"), "hello")
        assert message.content[0].type == "text"
        assert fleet.served("primary") == 1
        assert fleet.served("bedrock") == fleet.served("vertex") == fleet.served("foundry") == 0
        assert fleet.metric("gateway_upstream_selected_total", upstream="primary", reason="route") == 1
        fleet.emulators["primary"].set_fault(STORM)
        raw = await fleet.client("s-2").messages.with_raw_response.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
        assert "x-gateway-upstream" not in raw.headers  # internal names stay internal by default
        assert (
            fleet.metric(
                "gateway_requests_total", provider="bedrock", model=MODEL, stream="false", status_class="2xx"
            )
            == 1
        )


class Clock:
    """Wall-clock seconds the breakers and placements read (moved by the test)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


STORM = "fail_first=1000000:529,retry_after_ms=1"


async def test_529_storm_moves_the_session_once_and_it_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with four_upstreams(tmp_path, monkeypatch) as fleet:
        client = fleet.client("session-storm")
        await _turn(client, "one")
        assert fleet.served("primary") == 1
        fleet.emulators["primary"].set_fault(STORM)
        second = await _turn(client, "two")
        assert second.usage.cache_read_input_tokens == 0  # a cold cache on bedrock: written once
        assert (second.usage.cache_creation_input_tokens or 0) > 0
        third = await _turn(client, "three", stream=True)
        assert (third.usage.cache_read_input_tokens or 0) > 0  # stays on bedrock, whose cache it warmed
        fleet.emulators["primary"].set_fault("")  # recovered: the session stays until its cache would expire
        await _turn(client, "four")
        assert fleet.served("primary") == 3  # the first turn, then 1 try + 1 same-upstream retry
        assert fleet.served("bedrock") == 3
        assert fleet.served("vertex") == fleet.served("foundry") == 0
        assert (
            fleet.metric(
                "gateway_session_moves_total", **{"from": "primary", "to": "bedrock", "reason": "status_529"}
            )
            == 1
        )
        assert fleet.metric("gateway_cache_breaks_total", provider="bedrock", reason="upstream_changed") == 1
        assert fleet.metric("gateway_session_move_cache_write_tokens_total", upstream="bedrock") == (
            second.usage.cache_creation_input_tokens
        )


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("fail_first=1000000:500", "status_5xx"),
        ("reset", "connection_error"),
        ("stall_headers=5", "timeout"),
        ("fail_first=1000000:408", "timeout"),  # the upstream's own request timeout
    ],
)
async def test_primary_failures_fail_over_before_any_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str, reason: str
) -> None:
    sections = {"failover": {"same_upstream_retries": 0}}
    env = {"GATEWAY_FIRST_BYTE_TIMEOUT_S": "1"} if fault.startswith("stall_headers") else {}
    async with four_upstreams(
        tmp_path, monkeypatch, sections=sections, providers=("anthropic", "vertex"), env=env
    ) as fleet:
        fleet.emulators["primary"].set_fault(fault)
        results = await asyncio.gather(
            *(_turn(fleet.client(f"s-{i}"), f"hello {i}", stream=i % 2 == 0) for i in range(6))
        )
        assert all(m.content and m.content[0].type == "text" for m in results)  # lost 0, hung 0
        # each answered once by vertex, but for vertex's own failed tries (its retries as the last
        # candidate: on a loaded machine a try can exceed a 1 s first-byte timeout)
        assert fleet.served("vertex") == 6 + fleet.failures("vertex")
        assert fleet.metric("gateway_upstream_failures_total", upstream="primary", reason=reason) >= 1


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("overloaded_after=2", "status_529"),  # message_start, ping, then the API's overloaded_error event
        ("truncate_after=2", "connection_error"),  # a 200 stream that ends before any content
    ],
)
async def test_a_stream_failing_before_content_fails_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str, reason: str
) -> None:
    """Held back, nothing of the primary's stream reached the client: the next upstream answers
    (not the primary's non-streaming fallback), the sessions move once and stay, and the client
    sees one 200, no upstream error."""
    sections = {"failover": {"same_upstream_retries": 0}}
    async with four_upstreams(
        tmp_path, monkeypatch, sections=sections, providers=("anthropic", "vertex")
    ) as fleet:
        sessions = [fleet.client(f"s-{i}") for i in range(4)]
        await asyncio.gather(*(_turn(c, "first", stream=True) for c in sessions))
        assert fleet.served("primary") == 4
        fleet.emulators["primary"].set_fault(fault)
        results = await asyncio.gather(*(_turn(c, "second", stream=True) for c in sessions))
        assert all(m.stop_reason == "end_turn" and m.content for m in results)  # lost 0
        assert fleet.served("primary") == 8 and fleet.served("vertex") == 4  # no fallback call on primary
        assert fleet.metric("gateway_upstream_failures_total", upstream="primary", reason=reason) == 4
        moves = {"from": "primary", "to": "vertex", "reason": reason}
        assert fleet.metric("gateway_session_moves_total", **moves) == 4
        await _turn(sessions[0], "third", stream=True)  # moved, it stays
        assert fleet.served("primary") == 8 and fleet.served("vertex") == 5
        ok = {"model": MODEL, "stream": "true", "status_class": "2xx"}
        assert fleet.metric("gateway_requests_total", provider="anthropic", **ok) == 4
        assert fleet.metric("gateway_requests_total", provider="vertex", **ok) == 5
        for kind in ("overloaded_error", "api_error"):
            assert fleet.metric("gateway_upstream_errors_total", provider="anthropic", type=kind) == 0


async def test_connection_refused_upstream_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    dead = {
        "name": "dead",
        "provider": "anthropic",
        "base_url": f"http://127.0.0.1:{closed}",
        "credentials": {"ANTHROPIC_API_KEY": "k"},
    }
    order = ("dead", "foundry")
    async with four_upstreams(
        tmp_path, monkeypatch, order=order, extra=(dead,), providers=("foundry",)
    ) as fleet:
        message = await _turn(fleet.client("s-refused"), "hello", stream=True)
        assert message.content[0].type == "text"
        assert fleet.served("foundry") == 1
        # the first try and its one same-upstream retry (failover.same_upstream_retries: 1)
        assert (
            fleet.metric("gateway_upstream_failures_total", upstream="dead", reason="connection_error") == 2
        )


async def test_a_long_retry_after_moves_on_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A throttled primary's ``retry-after: 30`` kept the client waiting 30 s for the one
    same-upstream retry while Bedrock could answer; a short one is still waited for (the session's
    cache is on the primary)."""
    async with four_upstreams(tmp_path, monkeypatch, providers=("anthropic", "bedrock")) as fleet:
        fleet.emulators["primary"].set_fault("fail_first=1000000:429,retry_after=30")
        started = time.monotonic()
        message = await _turn(fleet.client("s-throttled"), "hello")
        assert message.content[0].type == "text" and time.monotonic() - started < 10
        assert (fleet.served("primary"), fleet.served("bedrock")) == (1, 1)  # no retry on the primary
        fleet.emulators["primary"].set_fault("fail_first=1:429,retry_after=0.2", key="brief")
        await _turn(fleet.client("s-brief"), "hello")
        assert (fleet.served("primary"), fleet.served("bedrock")) == (3, 1)  # retried there, served


async def test_slow_first_byte_within_the_timeout_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with four_upstreams(tmp_path, monkeypatch, providers=("anthropic", "bedrock")) as fleet:
        fleet.emulators["primary"].set_fault("stall_headers=0.3")
        await _turn(fleet.client("s-slow"), "hello", stream=True)
        assert (fleet.served("primary"), fleet.served("bedrock")) == (1, 0)


async def test_no_failover_after_content_was_sent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with four_upstreams(tmp_path, monkeypatch, providers=("anthropic", "bedrock")) as fleet:
        fleet.emulators["primary"].set_fault("overloaded_after=4")
        with pytest.raises(anthropic.APIStatusError) as info:
            await _turn(fleet.client("s-mid"), "hello", stream=True)
        assert info.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
        assert (fleet.served("primary"), fleet.served("bedrock")) == (1, 0)


BREAKER = {"failures": 2, "window_s": 60, "open_s": 30}


async def _open_the_primarys_breaker(fleet: Fleet) -> None:
    """A 529 storm on the primary for ``BREAKER``'s two failures: its breaker opens."""
    fleet.emulators["primary"].set_fault(STORM)
    for i in range(2):
        await _turn(fleet.client(), f"no session {i}")
    assert fleet.served("primary") == 2
    assert fleet.metric("gateway_breaker_state", upstream="primary") == 2  # open


async def test_breaker_opens_and_half_opens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    async with _clocked(tmp_path, monkeypatch, clock, BREAKER, ("anthropic", "bedrock")) as fleet:
        await _open_the_primarys_breaker(fleet)
        assert fleet.metric("gateway_upstream_health", upstream="primary") == 0
        await _turn(fleet.client(), "while open")
        assert fleet.served("primary") == 2  # skipped while open
        assert fleet.metric("gateway_upstream_selected_total", upstream="bedrock", reason="breaker_open") == 1
        clock.now += 31  # half-open: one probe request goes to the primary
        assert fleet.metric("gateway_breaker_state", upstream="primary") == 1  # before any traffic
        fleet.emulators["primary"].set_fault("")
        await _turn(fleet.client(), "probe")
        assert fleet.served("primary") == 3
        assert fleet.metric("gateway_breaker_state", upstream="primary") == 0  # closed on success
        assert fleet.metric("gateway_upstream_health", upstream="primary") == 1


async def test_half_open_failure_opens_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    breaker = {"failures": 1, "open_s": 10}
    async with _clocked(tmp_path, monkeypatch, clock, breaker, ("anthropic", "vertex")) as fleet:
        fleet.emulators["primary"].set_fault(STORM)
        await _turn(fleet.client(), "opens")
        assert fleet.metric("gateway_breaker_state", upstream="primary") == 2
        clock.now += 11
        await _turn(fleet.client(), "half-open probe fails")
        assert fleet.served("primary") == 2
        assert fleet.metric("gateway_breaker_state", upstream="primary") == 2  # open again


async def test_every_candidate_overloaded_is_529_with_retry_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    async with _clocked(tmp_path, monkeypatch, clock, {"failures": 1, "open_s": 20}) as fleet:
        for emulator in fleet.emulators.values():
            emulator.set_fault(STORM)
        for attempt in range(2):  # all four tried, then (breakers open) none
            with pytest.raises(anthropic.APIStatusError) as info:
                await _turn(fleet.client("s-all"), f"attempt {attempt}")
            assert info.value.status_code == 529
            assert info.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
            assert info.value.response.headers["x-should-retry"] == "true"
            assert 1 <= int(info.value.response.headers["retry-after"]) <= 20
        # one try each, the last candidate with the request's own retry budget (an SDK client that
        # retries itself gets one gateway retry); the second request found every breaker open
        assert [fleet.served(n) for n in ("primary", "bedrock", "vertex", "foundry")] == [1, 1, 1, 2]


async def test_a_move_between_providers_leaves_thinking_signatures_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with four_upstreams(tmp_path, monkeypatch, providers=("anthropic", "bedrock")) as fleet:
        client = fleet.client("s-thinking")
        thinking: anthropic.types.ThinkingConfigParam = {"type": "enabled", "budget_tokens": 1024}
        history: list[anthropic.types.MessageParam] = [{"role": "user", "content": "think first"}]
        first = await client.messages.create(
            model=MODEL,
            max_tokens=2048,
            system=SYSTEM,
            thinking=thinking,
            messages=history,
        )
        assert first.content[0].type == "thinking" and first.content[0].signature
        history += [
            {"role": "assistant", "content": [cast(Any, block.model_dump()) for block in first.content]},
            {"role": "user", "content": "and now?"},
        ]
        fleet.emulators["primary"].set_fault(STORM)
        second = await client.messages.create(
            model=MODEL,
            max_tokens=2048,
            system=SYSTEM,
            thinking=thinking,
            messages=history,
        )
        assert second.content
        sent = [r for r in fleet.emulators["bedrock"].requests if r.method == "POST"]
        assert len(sent) == 1
        assert first.content[0].signature.encode() not in sent[0].body
        assert b'"thinking"' in sent[0].body  # thinking stays on: the last assistant turn was not a tool call


async def test_active_probe_closes_a_half_open_breaker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    breaker = {"failures": 1, "open_s": 10}
    probe = {"interval_s": 0.1, "timeout_s": 2, "model": MODEL}
    async with _clocked(tmp_path, monkeypatch, clock, breaker, ("anthropic", "vertex"), probe=probe) as fleet:
        fleet.emulators["primary"].set_fault(STORM)
        await _turn(fleet.client(), "opens the breaker")
        assert fleet.metric("gateway_breaker_state", upstream="primary") == 2
        fleet.emulators["primary"].set_fault("")
        clock.now += 11  # half-open: the next probe (every 0.1 s) is its one trial request
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while fleet.metric("gateway_breaker_state", upstream="primary") != 0:
            assert loop.time() < deadline, "the probe never closed the breaker"
            await asyncio.sleep(0.05)
        probes = [r for r in fleet.emulators["primary"].requests if r.path.endswith("/count_tokens")]
        assert probes  # closed by a count_tokens probe, not by client traffic
        assert fleet.served("primary") == 1


async def test_a_stream_stalling_after_message_start_fails_over_despite_the_keep_alive_ping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The primary sends ``message_start`` and a ping, then nothing. The gateway's keep-alive
    ping (due every 0.3 s, before the 1.2 s idle timeout: the defaults' order, 15 s and 90 s) is
    not sent while the next upstream may still answer: it would commit the stalled stream. The
    stall is handed on at the idle timeout and the client gets the second upstream's answer."""
    env = {
        "GATEWAY_DOWNSTREAM_PING_S": "0.3",
        "GATEWAY_STREAM_IDLE_WARNING_S": "0.6",
        "GATEWAY_STREAM_IDLE_TIMEOUT_S": "1.2",
    }
    sections = {"failover": {"same_upstream_retries": 0}}
    async with four_upstreams(
        tmp_path, monkeypatch, sections=sections, providers=("anthropic", "foundry"), env=env
    ) as fleet:
        session = fleet.client("s-stall")
        await _turn(session, "first", stream=True)  # placed on the primary
        fleet.emulators["primary"].set_fault("stall_after=2:30")
        message = await _turn(session, "second", stream=True)
        assert message.stop_reason == "end_turn" and message.content[0].type == "text"
        assert fleet.served("primary") == 2 and fleet.served("foundry") == 1
        assert fleet.metric("gateway_upstream_failures_total", upstream="primary", reason="timeout") == 1
        moves = {"from": "primary", "to": "foundry", "reason": "timeout"}
        assert fleet.metric("gateway_session_moves_total", **moves) == 1


async def test_the_only_candidate_tried_failing_while_the_other_is_open_is_529(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The primary's breaker is open; the one upstream left fails (a 500): every candidate failed
    or is open, so the answer is the several-upstreams 529 with ``retry-after``, not that
    upstream's own error."""
    clock = Clock()
    async with _clocked(tmp_path, monkeypatch, clock, BREAKER, ("anthropic", "vertex")) as fleet:
        await _open_the_primarys_breaker(fleet)
        fleet.emulators["vertex"].set_fault("fail_first=1000000:500")
        for stream in (False, True):
            with pytest.raises(anthropic.APIStatusError) as info:
                await _turn(fleet.client(), "both down", stream=stream)
            assert info.value.status_code == 529
            assert info.value.response.headers["retry-after"] == "30"
            assert info.value.response.headers["x-should-retry"] == "true"
        assert fleet.served("primary") == 2  # skipped while open


async def test_a_half_open_probe_answered_on_its_retry_closes_the_breaker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's first try gets a 529, its same-upstream retry a 200: the probe succeeded, the
    circuit closes (the retried 529 does not reopen it first) and traffic returns to the primary."""
    clock = Clock()
    breaker = {"failures": 1, "open_s": 10}
    async with four_upstreams(
        tmp_path,
        monkeypatch,
        sections={"failover": {"same_upstream_retries": 1}, "breaker": breaker},
        providers=("anthropic", "bedrock"),
        app_kwargs={"wall_clock": clock},
    ) as fleet:
        fleet.emulators["primary"].set_fault(STORM)
        await _turn(fleet.client(), "opens")
        assert fleet.metric("gateway_breaker_state", upstream="primary") == 2
        clock.now += 11
        fleet.emulators["primary"].set_fault("fail_first=1:529,retry_after_ms=1", key="probe")
        served = fleet.served("primary"), fleet.served("bedrock")
        await _turn(fleet.client(), "probe")
        assert (fleet.served("primary"), fleet.served("bedrock")) == (served[0] + 2, served[1])
        assert fleet.metric("gateway_breaker_state", upstream="primary") == 0
        await _turn(fleet.client(), "after")
        assert fleet.served("primary") == served[0] + 3


async def test_a_candidate_may_have_its_own_first_byte_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway-wide first-byte timeout stays long (600 s: a non-streaming answer's headers come
    after the whole answer); a candidate that others back up gets a short one in its ``env``, so a
    primary that accepts and never answers is left in seconds, not ten minutes."""
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts (the kernel does), never answers
    hung = {
        "name": "hung",
        "provider": "anthropic",
        "base_url": f"http://127.0.0.1:{silent.getsockname()[1]}",
        "credentials": {"ANTHROPIC_API_KEY": "k"},
        "env": {"GATEWAY_FIRST_BYTE_TIMEOUT_S": 0.5},
    }
    try:
        async with four_upstreams(
            tmp_path,
            monkeypatch,
            order=("hung", "foundry"),
            extra=(hung,),
            providers=("foundry",),
            sections={"failover": {"same_upstream_retries": 0}},
            env={"GATEWAY_FIRST_BYTE_TIMEOUT_S": "600"},
        ) as fleet:
            started = asyncio.get_running_loop().time()
            message = await _turn(fleet.client("s-hung"), "hello", stream=True)
            assert message.content[0].type == "text" and fleet.served("foundry") == 1
            assert asyncio.get_running_loop().time() - started < 5
            assert fleet.metric("gateway_upstream_failures_total", upstream="hung", reason="timeout") == 1
    finally:
        silent.close()
