"""The retry budget: per-client-attempt gateway retries, the client advice, retry recognition.

A simulated client drives ``with_retry`` (injected clock and sleep) against an upstream that
always answers 529, the way the server wires it (``policy_for``, ``final_headers``,
``RetryMemory``), and the total number of upstream attempts per prompt is checked against the
formula the README states.
"""

from __future__ import annotations

import pytest

from gateway.providers.base import BufferedResponse, ClientRequest, Operation
from gateway.retry import ModelFallback, RetryEvent, RetryPolicy, RetryResult, Stop, with_retry
from gateway.retry_budget import (
    ClientRetries,
    client_should_retry,
    final_headers,
    gateway_retries,
    policy_for,
    prior_attempts,
)
from gateway.retry_memory import Recalled, RequestKey, RetryMemory

RETRY_AFTER_MS = {"retry-after-ms": "1"}


def _request(body: bytes = b'{"model":"claude-opus-4-8"}', retry_count: int | None = None) -> ClientRequest:
    headers = [] if retry_count is None else [("x-stainless-retry-count", str(retry_count))]
    return ClientRequest(Operation.MESSAGES, body, {"model": "claude-opus-4-8"}, headers, "rid")


class Upstream:
    """Answers every attempt with the same status; a manual clock that sleeping advances."""

    def __init__(self, status: int = 529, headers: dict[str, str] | None = None) -> None:
        self.status = status
        self.headers = dict(RETRY_AFTER_MS if headers is None else headers)
        self.sent: list[ClientRequest] = []
        self.now = 0.0

    async def send(self, request: ClientRequest) -> BufferedResponse:
        self.sent.append(request)
        return BufferedResponse(self.status, b"{}", list(self.headers.items()))

    async def sleep(self, seconds: float) -> None:
        self.now += seconds

    def clock(self) -> float:
        return self.now


async def _final(upstream: Upstream, request: ClientRequest, policy: RetryPolicy) -> RetryResult:
    events: list[RetryEvent] = [
        event
        async for event in with_retry(
            upstream.send, request, policy, sleep=upstream.sleep, clock=upstream.clock, rng=lambda: 0.0
        )
    ]
    final = events[-1]
    assert isinstance(final, RetryResult)
    return final


async def prompt(
    policy: RetryPolicy,
    client_max_retries: int,
    *,
    announces: str = "count",  # "count": 0, 1, 2...; "zero": always 0 (Claude Code); "none": no header
    honours_should_retry: bool = True,
    upstream: Upstream | None = None,
) -> tuple[int, list[dict[str, str]]]:
    """One user prompt: the client's attempts through the gateway. Upstream attempts and the advice
    the client received after each of its attempts."""
    upstream = upstream or Upstream()
    memory = RetryMemory(300.0, clock=upstream.clock)
    advice: list[dict[str, str]] = []
    for attempt_number in range(client_max_retries + 1):
        header = {"count": attempt_number, "zero": 0, "none": None}[announces]
        request = _request(retry_count=header)
        key = RequestKey("team", request)
        client = ClientRetries.from_headers(request.headers, memory.recall(key))
        final = await _final(upstream, request, policy_for(policy, client))
        assert final.stop is Stop.BUDGET
        memory.failed(key, final.retries + 1, final.overloads)
        advice.append(final_headers(policy, client, final, list(upstream.headers.items())))
        if honours_should_retry and advice[-1]["x-should-retry"] == "false":
            break
        upstream.now += 1.0  # the client's own back-off
    return len(upstream.sent), advice


def worst_case(policy: RetryPolicy, client_retries: int) -> int:
    """The README's formula for a retrying client that honours x-should-retry."""
    k = min(policy.client_retrying_max_retries, policy.max_retries)
    return sum(1 + max(0, k - n) for n in range(min(client_retries, policy.client_retry_limit) + 1))


async def test_sdk_defaults_cost_four_attempts_not_thirty_three() -> None:
    policy = RetryPolicy(max_retries=10)
    attempts, advice = await prompt(policy, client_max_retries=2)
    assert attempts == 4 == worst_case(policy, 2)
    assert [a["x-should-retry"] for a in advice] == ["true", "true", "true"]
    assert all(a["retry-after"] == "1" for a in advice)  # retry-after-ms 1 -> at least 1 s, never 0


async def test_claude_code_defaults_are_recognised_by_their_repeated_body() -> None:
    """Claude Code sends x-stainless-retry-count: 0 on every attempt: the memory counts them."""
    policy = RetryPolicy(max_retries=10)
    attempts, advice = await prompt(policy, client_max_retries=10, announces="zero")
    assert attempts == 12 == worst_case(policy, 10)
    assert [a["x-should-retry"] for a in advice] == ["true"] * 10 + ["false"]


@pytest.mark.parametrize(("limit", "expected"), [(0, 2), (1, 3), (2, 4), (10, 12)])
async def test_client_retry_limit_bounds_claude_code(limit: int, expected: int) -> None:
    policy = RetryPolicy(max_retries=10, client_retry_limit=limit)
    attempts, advice = await prompt(policy, client_max_retries=10, announces="zero")
    assert attempts == expected == worst_case(policy, 10)
    assert advice[-1]["x-should-retry"] == "false" and len(advice) == limit + 1


@pytest.mark.parametrize(("k", "sdk_attempts"), [(0, 3), (1, 4), (2, 6), (3, 9)])
async def test_budget_shrinks_with_each_client_retry(k: int, sdk_attempts: int) -> None:
    policy = RetryPolicy(max_retries=10, client_retrying_max_retries=k)
    assert [gateway_retries(policy, ClientRetries(n)) for n in range(4)] == [max(0, k - n) for n in range(4)]
    attempts, _ = await prompt(policy, client_max_retries=2)
    assert attempts == sdk_attempts == worst_case(policy, 2)


async def test_client_retrying_budget_never_exceeds_gateway_max() -> None:
    policy = RetryPolicy(max_retries=0, client_retrying_max_retries=3)
    assert gateway_retries(policy, ClientRetries(0)) == 0
    attempts, _ = await prompt(policy, client_max_retries=2)
    assert attempts == 3


async def test_plain_client_gets_the_full_budget_then_is_told_to_stop() -> None:
    policy = RetryPolicy(max_retries=10)
    attempts, advice = await prompt(policy, client_max_retries=5, announces="none")
    assert attempts == 11 and advice[0]["x-should-retry"] == "false"


async def test_plain_client_ignoring_advice_gets_no_more_gateway_retries() -> None:
    policy = RetryPolicy(max_retries=10)
    attempts, _ = await prompt(policy, client_max_retries=3, announces="none", honours_should_retry=False)
    assert attempts == 11 + 3  # its repeats are recognised: no gateway retries under them


async def test_plain_client_without_gateway_retries_is_encouraged() -> None:
    policy = RetryPolicy(max_retries=0)
    attempts, advice = await prompt(policy, client_max_retries=2, announces="none")
    assert attempts == 3 and [a["x-should-retry"] for a in advice] == ["true"] * 3


async def test_client_ignoring_advice_costs_its_attempts_plus_k_triangle() -> None:
    policy = RetryPolicy(max_retries=10, client_retry_limit=1)
    attempts, _ = await prompt(policy, client_max_retries=20, honours_should_retry=False)
    assert attempts == 21 + 1


def test_client_retries_from_headers() -> None:
    def parse(value: str | None, repeats: int = 0) -> tuple[int | None, bool]:
        headers = [] if value is None else [("X-Stainless-Retry-Count", value)]
        recalled = Recalled(repeats, 2 * repeats, 0) if repeats else None
        client = ClientRetries.from_headers(headers, recalled)
        assert client.recalled == recalled
        return client.count, client.announced

    assert parse(None) == (None, False)
    assert parse("0") == (0, True) and parse(" 2 ") == (2, True)
    assert parse("0", repeats=3) == (3, True)  # Claude Code: the header stays 0
    assert parse("5", repeats=1) == (5, True)
    assert parse(None, repeats=2) == (2, False)
    for junk in ("abc", "-1", "1e9", "99999"):
        assert parse(junk) == (None, False)


def test_prior_attempts_remembered_else_estimated() -> None:
    policy = RetryPolicy(max_retries=10, client_retrying_max_retries=1)
    assert [prior_attempts(policy, ClientRetries(n)) for n in range(4)] == [0, 2, 3, 4]
    assert prior_attempts(policy, ClientRetries(None, announced=False)) == 0
    assert prior_attempts(policy, ClientRetries(3, recalled=Recalled(3, 7, 0))) == 7


def _attempt(stop: Stop, retries: int = 0, status: int = 529) -> RetryResult:
    return RetryResult(BufferedResponse(status, b"{}", []), None, retries, None, _request(), stop, 0.5)


def test_final_headers_hints() -> None:
    policy = RetryPolicy(max_retries=10)
    first = ClientRetries(0)
    attempt = _attempt(Stop.BUDGET, retries=1)
    # the upstream's hints win, sent in both forms (the whole seconds rounded up)
    assert final_headers(policy, first, attempt, [("retry-after-ms", "1500")]) == {
        "x-should-retry": "true",
        "retry-after-ms": "1500",
        "retry-after": "2",
    }
    assert final_headers(policy, first, attempt, [("retry-after", "7")]) == {
        "x-should-retry": "true",
        "retry-after-ms": "7000",
        "retry-after": "7",
    }
    # no hint: 0.5 s doubling per upstream attempt of the prompt so far, capped at 8 s, jitter down
    assert final_headers(policy, first, attempt, [], rng=lambda: 0.0) == {
        "x-should-retry": "true",
        "retry-after-ms": "1000",
        "retry-after": "1",
    }
    late = final_headers(policy, ClientRetries(5), _attempt(Stop.BUDGET), [], rng=lambda: 1.0)
    assert late == {"x-should-retry": "true", "retry-after-ms": "6000", "retry-after": "6"}  # 6 attempts: 8 s
    remembered = ClientRetries(1, recalled=Recalled(1, 1, 0))
    assert (
        final_headers(policy, remembered, _attempt(Stop.BUDGET), [], rng=lambda: 0.0)["retry-after-ms"]
        == "1000"
    )
    capped = RetryPolicy(max_retries=10, max_delay_s=0.2)
    assert final_headers(capped, first, attempt, [], rng=lambda: 0.0)["retry-after-ms"] == "200"


def test_final_headers_when_not_worth_retrying() -> None:
    policy = RetryPolicy(max_retries=10)
    assert final_headers(policy, ClientRetries(0), _attempt(Stop.DONE, status=400), []) == {}
    refused = final_headers(policy, ClientRetries(0), _attempt(Stop.REFUSED), [])
    assert refused == {"x-should-retry": "false"}  # no wait of its own when the upstream gave none
    refused = final_headers(policy, ClientRetries(0), _attempt(Stop.REFUSED), [("retry-after", "3")])
    assert refused == {"x-should-retry": "false", "retry-after-ms": "3000", "retry-after": "3"}
    deadline = final_headers(policy, ClientRetries(0), _attempt(Stop.DEADLINE), [("retry-after", "900")])
    assert deadline == {"x-should-retry": "false", "retry-after-ms": "600000", "retry-after": "600"}
    assert not client_should_retry(policy, ClientRetries(10), _attempt(Stop.BUDGET))
    assert client_should_retry(policy, ClientRetries(9), _attempt(Stop.BUDGET))


@pytest.mark.parametrize(
    "hint",
    [
        ("retry-after-ms", "inf"),  # a traceback and a 500 (OverflowError) for this one
        ("retry-after-ms", "1e308"),  # a 309-digit retry-after
        ("retry-after", "99999999999999999999999"),
        ("retry-after", "inf"),
        ("retry-after", "Wed, 21 Oct 2099 07:28:00 GMT"),
    ],
)
@pytest.mark.parametrize("stop", [Stop.BUDGET, Stop.REFUSED])
def test_a_hint_no_client_should_sleep_on_is_bounded(hint: tuple[str, str], stop: Stop) -> None:
    """Relayed as they came, the SDK slept its own cap (4,294,967 s: 49 days) on these."""
    policy = RetryPolicy(max_retries=10, deadline_s=120.0)
    advice = final_headers(policy, ClientRetries(0), _attempt(stop), [hint])
    assert advice["retry-after-ms"] == "120000" and advice["retry-after"] == "120"


@pytest.mark.parametrize(
    "hint",
    [
        ("retry-after-ms", "NaN"),
        ("retry-after-ms", "-1"),
        ("retry-after", "-5"),
        ("retry-after", "nan"),
        ("retry-after", "soon"),
        ("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT"),
    ],
)
def test_a_hint_no_client_can_use_is_replaced_by_the_gateways(hint: tuple[str, str]) -> None:
    policy = RetryPolicy(max_retries=10)
    advice = final_headers(policy, ClientRetries(0), _attempt(Stop.BUDGET, retries=1), [hint], rng=lambda: 0.0)
    assert advice == {"x-should-retry": "true", "retry-after-ms": "1000", "retry-after": "1"}


async def test_stop_reasons() -> None:
    policy = RetryPolicy(max_retries=1, deadline_s=10.0)
    budget = await _final(Upstream(529, {}), _request(), policy)
    assert budget.stop is Stop.BUDGET and budget.retries == 1 and budget.next_delay_s == 1.0
    deadline = await _final(Upstream(529, {"retry-after": "30"}), _request(), policy)
    assert deadline.stop is Stop.DEADLINE and deadline.retries == 0 and deadline.next_delay_s == 30.0
    refused = await _final(Upstream(529, {"x-should-retry": "false"}), _request(), policy)
    assert refused.stop is Stop.REFUSED and refused.retries == 0
    final = await _final(Upstream(400, {"x-should-retry": "false"}), _request(), policy)
    assert final.stop is Stop.DONE
    ok = await _final(Upstream(200, {}), _request(), policy)
    assert ok.stop is Stop.DONE and ok.next_delay_s is None


async def test_model_fallback_counts_the_clients_earlier_overloads() -> None:
    """With a budget of 1 per client attempt, three consecutive overloads never happen inside one
    request; remembered ones count, so the client's third attempt goes to the fallback model."""
    policy = RetryPolicy(max_retries=10, fallback_model="claude-sonnet-4-6", fallback_after_overloads=3)
    memory = RetryMemory(300.0)
    models: list[list[str]] = []
    for n in range(3):
        upstream = Upstream()
        request = _request(retry_count=n)
        key = RequestKey("team", request)
        events = [
            event
            async for event in with_retry(
                upstream.send,
                request,
                policy_for(policy, ClientRetries.from_headers(request.headers, memory.recall(key))),
                sleep=upstream.sleep,
                clock=upstream.clock,
            )
        ]
        final = events[-1]
        assert isinstance(final, RetryResult)
        memory.failed(key, final.retries + 1, final.overloads)
        models.append([r.model for r in upstream.sent])
        assert any(isinstance(e, ModelFallback) for e in events) == (n == 2)
    assert models == [["claude-opus-4-8"] * 2, ["claude-opus-4-8"], ["claude-sonnet-4-6"]]


async def test_other_failures_are_not_overloads() -> None:
    policy = RetryPolicy(max_retries=10, fallback_model="claude-sonnet-4-6", fallback_after_overloads=2)
    request = _request(retry_count=1)
    client = ClientRetries.from_headers(request.headers, Recalled(1, 2, 0))  # two 500s before
    final = await _final(Upstream(529), request, policy_for(policy, client))
    assert final.model_fallback is None and final.overloads == 1


def test_memory_window_success_and_bound() -> None:
    now = [0.0]
    memory = RetryMemory(60.0, max_entries=2, clock=lambda: now[0])
    a, b, c = (RequestKey("team", _request(body)) for body in (b"a", b"b", b"c"))
    assert memory.recall(a) is None
    memory.failed(a, 2, 2)
    memory.failed(a, 1, 3)
    assert memory.recall(a) == Recalled(failures=2, upstream_attempts=3, overloads=3)
    assert memory.recall(b) is None
    assert memory.recall(RequestKey("other-team", _request(b"a"))) is None
    now[0] = 59.0
    memory.failed(b, 1, 0)
    assert memory.recall(a) is not None  # each failure restarts its window
    now[0] = 61.0
    assert memory.recall(a) is None and memory.recall(b) == Recalled(1, 1, 0)
    memory.failed(c, 1, 0)
    memory.failed(a, 1, 0)
    assert len(memory) == 2 and memory.recall(b) is None  # the least recently failed went first
    memory.succeeded(a)
    assert memory.recall(a) is None and memory.recall(c) is not None


def test_memory_disabled_and_lazy_hashing() -> None:
    memory = RetryMemory(0.0)
    key = RequestKey("team", _request())
    memory.failed(key, 1, 1)
    assert memory.recall(key) is None and len(memory) == 0
    fresh = RequestKey("team", _request())
    assert RetryMemory(300.0).recall(fresh) is None
    assert fresh._digest is None  # nothing remembered: nothing hashed
