"""Several upstreams, a 200 stream that fails before its first content event: the request moves
on as the status that failure stands for would have moved it, and leaves no trace of the upstream
that failed (breaker, placement, accounting).

The refusing upstream is a small aiohttp app in the first-party shape (``message_start``, then the
API's ``error`` event: the shape Anthropic publishes for errors during a stream, "Error events" in
its streaming docs); the others are the emulators of ``tests.upstreams.harness``.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from aiohttp import web

from gateway.streaming.sse import encode_event
from tests.support.local_app import serving
from tests.support.sse_answers import message_start
from tests.upstreams.harness import MODEL, SYSTEM, four_upstreams
from tests.upstreams.test_failover_faults import (
    BREAKER,
    STORM,
    Clock,
    _clocked,
    _open_the_primarys_breaker,
    _turn,
)

pytestmark = pytest.mark.timeout(60)

ERROR_TYPE = web.AppKey("error_type", str)
CALLS = web.AppKey("calls", list[str])


async def _refuse(request: web.Request) -> web.StreamResponse:
    await request.read()
    request.app[CALLS].append(request.path)
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    await response.write(message_start(MODEL, message_id="msg_refused", input_tokens=9))
    error_type = request.app[ERROR_TYPE]
    error = {"type": "error", "error": {"type": error_type, "message": f"{error_type} in the stream"}}
    await response.write(encode_event("error", error))
    await response.write_eof()
    return response


@contextlib.asynccontextmanager
async def _refusing(error_type: str) -> AsyncIterator[tuple[dict[str, Any], web.Application]]:
    app = web.Application()
    app[ERROR_TYPE] = error_type
    app[CALLS] = []
    app.router.add_post("/v1/messages", _refuse)
    async with serving(app) as url:
        yield (
            {
                "name": "bad",
                "provider": "anthropic",
                "base_url": url,
                "credentials": {"ANTHROPIC_API_KEY": "k"},
            },
            app,
        )


@pytest.mark.parametrize(
    ("error_type", "reason"),
    [
        ("overloaded_error", "status_529"),
        ("rate_limit_error", "status_429"),  # Bedrock's throttlingException frame, translated
        ("timeout_error", "timeout"),  # Bedrock's modelTimeoutException frame, translated
        ("api_error", "status_5xx"),
        ("invalid_request_error", None),  # the request's own fault: answered, not moved
    ],
)
async def test_an_error_event_before_content_moves_as_its_status_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error_type: str, reason: str | None
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        bad, app = await stack.enter_async_context(_refusing(error_type))
        fleet = await stack.enter_async_context(
            four_upstreams(
                tmp_path, monkeypatch, order=("bad", "vertex"), extra=(bad,), providers=("vertex",)
            )
        )
        if reason is None:
            with pytest.raises(anthropic.BadRequestError) as info:
                await _turn(fleet.client("s-1"), "hello", stream=True)
            assert info.value.body["error"]["message"] == "invalid_request_error in the stream"  # type: ignore[index]
            assert fleet.served("vertex") == 0
            assert fleet.metric("gateway_breaker_state", upstream="bad") == 0
            return
        message = await _turn(fleet.client("s-1"), "hello", stream=True)
        assert message.stop_reason == "end_turn" and message.content
        assert len(app[CALLS]) == 1 and fleet.served("vertex") == 1  # no fallback on "bad"
        assert fleet.metric("gateway_upstream_failures_total", upstream="bad", reason=reason) == 1


async def test_a_half_open_probe_that_fails_before_content_opens_the_breaker_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    async with _clocked(tmp_path, monkeypatch, clock, BREAKER, ("anthropic", "bedrock")) as fleet:
        await _open_the_primarys_breaker(fleet)
        clock.now += 31  # half-open: the probe's stream is overloaded right after message_start
        fleet.emulators["primary"].set_fault("overloaded_after=2")
        message = await _turn(fleet.client(), "probe", stream=True)
        assert message.content and fleet.served("primary") == 3
        assert fleet.metric("gateway_breaker_state", upstream="primary") == 2  # open again, not closed
        await _turn(fleet.client(), "while open", stream=True)
        assert fleet.served("primary") == 3


async def test_a_candidate_that_hands_back_leaves_no_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with four_upstreams(tmp_path, monkeypatch, providers=("anthropic", "bedrock", "vertex")) as fleet:
        client = fleet.client("s-three")
        await _turn(client, "one", stream=True)  # placed on the primary
        fleet.emulators["primary"].set_fault(STORM)
        fleet.emulators["bedrock"].set_fault("overloaded_after=1")  # message_start, then the exception frame
        fleet.emulators["vertex"].set_fault(STORM)
        with pytest.raises(anthropic.APIStatusError) as info:
            await _turn(client, "two", stream=True)
        assert info.value.status_code == 529
        assert "every upstream" in info.value.body["error"]["message"]  # type: ignore[index]
        for provider in ("bedrock", "vertex"):  # the gateway's 529 is nobody's upstream error
            assert (
                fleet.metric("gateway_upstream_errors_total", provider=provider, type="overloaded_error") == 0
            )
            failed = {"model": MODEL, "stream": "true", "status_class": "5xx"}
            assert fleet.metric("gateway_requests_total", provider=provider, **failed) == 0
        fleet.emulators["vertex"].set_fault("")
        before = fleet.served("vertex")
        message = await _turn(client, "three", stream=True)
        assert message.content and fleet.served("vertex") == before + 1
        moved = {"from": "primary", "reason": "status_529"}
        assert fleet.metric("gateway_session_moves_total", to="bedrock", **moved) == 0
        assert fleet.metric("gateway_session_moves_total", to="vertex", **moved) == 1
        tried = fleet.served("bedrock")
        await _turn(client, "four", stream=True)  # placed on vertex (not on bedrock): straight there
        assert fleet.served("vertex") == before + 2 and fleet.served("bedrock") == tried


async def test_the_last_candidate_that_can_answer_keeps_its_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dead``'s breaker is open, so the primary is the only candidate left: its overloaded stream
    is replaced by its non-streaming fallback, not handed back to fail on nothing. (With ``dead``'s
    breaker still closed, the stream is handed back, ``dead`` fails and the client gets the 529 of
    "every upstream unavailable", which the SDKs retry; after ``failures`` such failures the
    breaker opens and this case is reached.)"""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    dead = {"name": "dead", "provider": "anthropic", "base_url": f"http://127.0.0.1:{closed}"}
    dead["credentials"] = {"ANTHROPIC_API_KEY": "k"}
    routes = [
        {"models": ["claude-haiku-4-5"], "upstreams": ["dead"]},
        {"models": ["*"], "upstreams": ["primary", "dead"]},
    ]
    sections = {"routes": routes, "breaker": {"failures": 2, "window_s": 60, "open_s": 300}}
    async with four_upstreams(
        tmp_path,
        monkeypatch,
        extra=(dead,),
        sections=sections,
        providers=("anthropic",),
        env={"GATEWAY_NONSTREAMING_FALLBACK": "1"},
    ) as fleet:
        with pytest.raises(anthropic.APIStatusError):
            await fleet.client().messages.create(
                model="claude-haiku-4-5", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
            )
        assert fleet.metric("gateway_breaker_state", upstream="dead") == 2
        fleet.emulators["primary"].set_fault("overloaded_after=2")
        messages: list[anthropic.types.MessageParam] = [{"role": "user", "content": "hello"}]
        async with fleet.client("s-fallback").messages.stream(
            model=MODEL, max_tokens=32, system=SYSTEM, messages=messages
        ) as stream:
            message = await stream.get_final_message()
        assert message.content and fleet.served("primary") == 2  # the stream, then its fallback


async def _not_a_message(request: web.Request) -> web.StreamResponse:
    await request.read()
    request.app[CALLS].append(request.path)
    return web.Response(text="<html>Please sign in to the proxy</html>", content_type="text/html")


async def test_a_whole_answer_that_is_not_a_message_fails_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A non-streaming 200 is read whole before a byte is sent: one the client could not use
    (here a proxy's page; a cut, stalled or oversized body likewise) moves on to the next."""
    app = web.Application()
    app[CALLS] = []
    app.router.add_post("/v1/messages", _not_a_message)
    async with contextlib.AsyncExitStack() as stack:
        url = await stack.enter_async_context(serving(app))
        bad = {
            "name": "bad",
            "provider": "anthropic",
            "base_url": url,
            "credentials": {"ANTHROPIC_API_KEY": "k"},
        }
        fleet = await stack.enter_async_context(
            four_upstreams(
                tmp_path, monkeypatch, order=("bad", "vertex"), extra=(bad,), providers=("vertex",)
            )
        )
        message = await _turn(fleet.client("s-page"), "hello")
        assert message.content and len(app[CALLS]) == 1 and fleet.served("vertex") == 1
        failed = {"upstream": "bad", "reason": "connection_error"}
        assert fleet.metric("gateway_upstream_failures_total", **failed) == 1
        assert fleet.metric("gateway_upstream_errors_total", provider="anthropic", type="api_error") == 0
