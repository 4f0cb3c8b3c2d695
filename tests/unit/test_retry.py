"""with_retry: bounded, honours the server's hints, yields its status events, falls back."""

from __future__ import annotations

import email.utils
from collections.abc import AsyncIterator

import pytest

from gateway.errors import GatewayError, UpstreamTimeout, UpstreamUnavailable
from gateway.providers.base import BufferedResponse, ClientRequest, Operation, UpstreamResponse
from gateway.retry import (
    FirstAttempt,
    ModelFallback,
    RetryEvent,
    RetryPolicy,
    RetryResult,
    RetryStatus,
    backoff_delay,
    first_attempt,
    parse_retry_after,
    with_retry,
)


def _request(model: str = "claude-opus-4-8") -> ClientRequest:
    payload = {"model": model, "max_tokens": 5, "messages": [], "stream": True}
    return ClientRequest(Operation.MESSAGES, b"{}", payload, [], "rid")


class Script:
    """A fake upstream answering from a list; records what was sent and how long we slept."""

    def __init__(self, answers: list[UpstreamResponse | GatewayError]) -> None:
        self.answers = list(answers)
        self.sent: list[ClientRequest] = []
        self.slept: list[float] = []
        self.now = 0.0
        self.closed = 0

    async def send(self, request: ClientRequest) -> UpstreamResponse:
        self.sent.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, GatewayError):
            raise answer
        return answer

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def status(code: int, **headers: str) -> BufferedResponse:
    return BufferedResponse(code, b"{}", list(headers.items()))


async def run(script: Script, policy: RetryPolicy, **kwargs: object) -> list[RetryEvent]:
    events: AsyncIterator[RetryEvent] = with_retry(
        script.send,
        _request(),
        policy,
        sleep=script.sleep,
        clock=script.clock,
        rng=lambda: 0.0,
        **kwargs,  # type: ignore[arg-type]
    )
    return [event async for event in events]


async def test_success_first_time() -> None:
    script = Script([status(200)])
    events = await run(script, RetryPolicy())
    assert len(events) == 1 and isinstance(events[0], RetryResult)
    assert events[0].response is not None and events[0].response.status == 200
    assert events[0].retries == 0


@pytest.mark.parametrize("code", [408, 409, 429, 500, 502, 503, 504, 529])
async def test_retryable_statuses(code: int) -> None:
    script = Script([status(code), status(code), status(200)])
    events = await run(script, RetryPolicy())
    statuses = [e for e in events if isinstance(e, RetryStatus)]
    assert [s.attempt for s in statuses] == [1, 2]
    assert all(s.reason == f"status_{code}" for s in statuses)
    assert script.slept == [0.5, 1.0]  # exponential backoff, no jitter with rng=0
    final = events[-1]
    assert isinstance(final, RetryResult) and final.retries == 2 and final.response.status == 200  # type: ignore[union-attr]


@pytest.mark.parametrize("code", [400, 401, 403, 404, 413])
async def test_client_errors_are_final(code: int) -> None:
    script = Script([status(code)])
    events = await run(script, RetryPolicy())
    assert len(events) == 1 and len(script.sent) == 1


async def test_x_should_retry_overrides() -> None:
    script = Script([status(429, **{"x-should-retry": "false"})])
    assert len(await run(script, RetryPolicy())) == 1
    script = Script([status(400, **{"x-should-retry": "true"}), status(200)])
    events = await run(script, RetryPolicy())
    assert isinstance(events[0], RetryStatus) and len(script.sent) == 2


async def test_retry_after_headers() -> None:
    script = Script(
        [
            status(429, **{"retry-after": "3"}),
            status(429, **{"retry-after-ms": "250", "retry-after": "9"}),
            status(200),
        ]
    )
    await run(script, RetryPolicy())
    assert script.slept == [3.0, 0.25]


async def test_server_asked_delay_is_capped() -> None:
    script = Script([status(529, **{"retry-after": "500"}), status(200)])
    await run(script, RetryPolicy(max_delay_s=20))
    assert script.slept == [20]


async def test_backoff_is_capped_at_8s() -> None:
    script = Script([status(500)] * 7 + [status(200)])
    await run(script, RetryPolicy())
    assert script.slept == [0.5, 1, 2, 4, 8, 8, 8]


async def test_max_retries_bound() -> None:
    script = Script([status(500)] * 4)
    events = await run(script, RetryPolicy(max_retries=3))
    final = events[-1]
    assert isinstance(final, RetryResult) and final.response.status == 500 and final.retries == 3  # type: ignore[union-attr]
    assert len(script.sent) == 4


async def test_deadline_bound() -> None:
    script = Script([status(500)] * 20)
    events = await run(script, RetryPolicy(deadline_s=3.0))
    assert sum(script.slept) <= 3.0
    assert isinstance(events[-1], RetryResult) and len(script.sent) == 3  # waits 0.5 + 1 then 2 would pass 3s


async def test_connection_errors_and_timeouts_retry_but_tls_does_not() -> None:
    script = Script([UpstreamUnavailable("refused"), UpstreamTimeout("slow"), status(200)])
    events = await run(script, RetryPolicy())
    assert [e.reason for e in events if isinstance(e, RetryStatus)] == ["connection_error", "timeout"]
    script = Script([UpstreamUnavailable("bad cert", retryable=False)])
    events = await run(script, RetryPolicy())
    assert len(events) == 1 and isinstance(events[0], RetryResult) and events[0].error is not None


async def test_model_fallback_after_consecutive_overloads() -> None:
    script = Script([status(529), status(529), status(529), status(200)])
    events = await run(script, RetryPolicy(fallback_model="claude-sonnet-4-6", fallback_after_overloads=3))
    fallbacks = [e for e in events if isinstance(e, ModelFallback)]
    assert fallbacks == [ModelFallback("claude-opus-4-8", "claude-sonnet-4-6")]
    assert [r.model for r in script.sent] == ["claude-opus-4-8"] * 3 + ["claude-sonnet-4-6"]
    assert b'"model":"claude-sonnet-4-6"' in script.sent[-1].body
    final = events[-1]
    assert isinstance(final, RetryResult) and final.model_fallback == "claude-sonnet-4-6"


async def test_overload_count_resets_on_other_errors() -> None:
    script = Script([status(529), status(529), status(500), status(529), status(200)])
    events = await run(script, RetryPolicy(fallback_model="x", fallback_after_overloads=3))
    assert not any(isinstance(e, ModelFallback) for e in events)


async def test_credential_refresh_retried_once() -> None:
    refreshed: list[int] = []

    async def refresh() -> bool:
        refreshed.append(1)
        return True

    script = Script([status(401), status(401)])
    events = await run(script, RetryPolicy(), refresh_credentials=refresh)
    assert refreshed == [1] and len(script.sent) == 2
    assert [e.reason for e in events if isinstance(e, RetryStatus)] == ["credential_refresh"]
    final = events[-1]
    assert isinstance(final, RetryResult) and final.response.status == 401  # type: ignore[union-attr]


async def test_no_refresh_no_retry() -> None:
    async def refresh() -> bool:
        return False

    script = Script([status(403)])
    assert len(await run(script, RetryPolicy(), refresh_credentials=refresh)) == 1


def test_parse_retry_after_forms() -> None:
    assert parse_retry_after([("retry-after", "2.5")]) == 2.5
    assert parse_retry_after([("retry-after-ms", "1500")]) == 1.5
    assert parse_retry_after([("retry-after-ms", "nope"), ("retry-after", "1")]) == 1.0
    assert parse_retry_after([("retry-after", "0")]) is None
    assert parse_retry_after([("retry-after", "garbage")]) is None
    date = email.utils.formatdate(1_000_010, usegmt=True)
    assert parse_retry_after([("retry-after", date)], now=lambda: 1_000_000.0) == pytest.approx(10)


def test_backoff_jitter_range() -> None:
    assert backoff_delay(0, lambda: 1.0) == 0.375
    assert backoff_delay(10, lambda: 0.0) == 8.0


async def test_model_fallback_strips_thinking_signatures() -> None:
    payload = {
        "model": "claude-opus-4-8",
        "max_tokens": 5,
        "messages": [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "t", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "x"},
                    {"type": "tool_use", "id": "tu", "name": "n", "input": {}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu", "content": "r"}]},
        ],
    }
    request = ClientRequest(Operation.MESSAGES, b"{}", payload, [], "rid")
    switched = request.with_model("claude-sonnet-4-6")
    assistant = switched.payload["messages"][1]["content"]
    assert [b["type"] for b in assistant] == ["tool_use"]
    assert b"signature" not in switched.body and switched.model == "claude-sonnet-4-6"
    assert request.payload["messages"][1]["content"][0]["type"] == "thinking"  # original untouched


async def _split_run(script: Script, policy: RetryPolicy) -> list[RetryEvent]:
    """The server's way: ``first_attempt`` sends once, the loop goes on only if that was not final."""
    first = await first_attempt(script.send, _request(), policy, script.clock)
    if isinstance(first, RetryResult):
        return [first]
    return await run(script, policy, first=first)


def _shape(events: list[RetryEvent]) -> list[tuple[object, ...]]:
    shaped: list[tuple[object, ...]] = []
    for event in events:
        if isinstance(event, RetryResult):
            status_code = None if event.response is None else event.response.status
            error = None if event.error is None else (event.error.status, event.error.error_type)
            shaped.append(("result", status_code, error, event.retries, event.model_fallback, event.stop))
        else:
            shaped.append((type(event).__name__, *vars_of(event)))
    return shaped


def vars_of(event: RetryStatus | ModelFallback) -> tuple[object, ...]:
    if isinstance(event, RetryStatus):
        return (event.attempt, event.reason, event.delay_s)
    return (event.from_model, event.to_model)


@pytest.mark.parametrize(
    "answers",
    [
        [200],
        [529, 200],
        [529, 529, 529, 529, 200],
        [400],
        [401],
        ["timeout", 200],
        ["unavailable", "unavailable", 503, 200],
        [529] * 12,
    ],
)
@pytest.mark.parametrize("fallback", [None, "claude-haiku-4-5"])
async def test_first_attempt_then_the_loop_is_the_loop(answers: list[object], fallback: str | None) -> None:
    """Sending the first attempt outside the loop changes nothing the client or the logs see:
    the same attempts, events, waits and final result as the loop alone."""

    def script() -> Script:
        made: list[UpstreamResponse | GatewayError] = []
        for answer in answers:
            if answer == "timeout":
                made.append(UpstreamTimeout("slow"))
            elif answer == "unavailable":
                made.append(UpstreamUnavailable("down"))
            else:
                assert isinstance(answer, int)
                made.append(status(answer))
        return Script(made)

    policy = RetryPolicy(max_retries=6, fallback_model=fallback, fallback_after_overloads=3)
    alone, split = script(), script()
    expected = await run(alone, policy)
    got = await _split_run(split, policy)
    assert _shape(got) == _shape(expected)
    assert [r.model for r in split.sent] == [r.model for r in alone.sent]
    assert split.slept == alone.slept


async def test_a_request_starting_with_a_fallback_is_left_to_the_loop() -> None:
    """A prompt that already met overloads goes to the fallback model first: nothing is sent."""
    script = Script([status(200)])
    policy = RetryPolicy(fallback_model="claude-haiku-4-5", fallback_after_overloads=2, prior_overloads=2)
    assert await first_attempt(script.send, _request(), policy, script.clock) is None
    assert script.sent == []


async def test_the_deadline_counts_from_the_first_attempt() -> None:
    """The first attempt's time counts against the request deadline, as inside the loop."""
    script = Script([status(529), status(529), status(200)])

    async def slow_send(request: ClientRequest) -> UpstreamResponse:
        script.now += 5.0  # every attempt takes 5 s
        return await script.send(request)

    policy = RetryPolicy(deadline_s=11.0)
    first = await first_attempt(slow_send, _request(), policy, script.clock)
    assert isinstance(first, FirstAttempt) and first.sent_at == 0.0
    events = [
        e
        async for e in with_retry(
            slow_send, _request(), policy, sleep=script.sleep, clock=script.clock, rng=lambda: 0.0, first=first
        )
    ]
    final = events[-1]
    # 5 s first attempt + 0.5 s wait + 5 s second attempt = 10.5 s; the next wait (1 s) would pass 11 s
    assert isinstance(final, RetryResult) and final.stop.value == "deadline" and final.retries == 1
