"""The fault matrix: every provider x every injected fault, driven by the real SDK through the
gateway. Each request must end in a complete message or a well-formed Anthropic error within its
bound; retries and fallbacks happen exactly as configured (asserted on the emulator's request
log); nothing is sent again after content was forwarded; no client connection stays open.

A summary (cases, lost requests, hung connections, worst time to a client-visible outcome per
scenario) is printed at the end of the run.

Times are the event loop's: these tests run on virtual time (see ``conftest``), so a watchdog
fires when the emulator stalls on purpose and a bound measures the gateway's waits, not how long
the test process was descheduled or paused by a garbage collection.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import anthropic
import orjson
import pytest

from tests.support.provider_stack import PROVIDERS, ProviderStack, provider_stack

MODEL = "claude-sonnet-4-5"
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

BOUND_S = 3.0  # no scenario may take longer than this to reach the client


@dataclass(frozen=True)
class Case:
    name: str
    fault: str  # the x-emulator-fault header (first-party/Vertex/Foundry SSE event counts)
    bedrock_fault: str | None  # the same fault counted in Bedrock event-stream frames
    outcome: str  # "message" or "error"
    upstream_calls: tuple[str, ...]  # "s" streaming / "n" non-streaming, in order
    streaming: bool = True


# SSE counts: 1 message_start, 2 ping, 3 content_block_start ... ; Bedrock: 1 message_start,
# 2 content_block_start ... (no pings)
CASES = [
    Case("stall_before_content", "stall_after=2:1,first=1", "stall_after=1:1,first=1", "message", ("s", "n")),
    Case("stall_after_content", "stall_after=4:1", "stall_after=3:1", "error", ("s",)),
    Case("ping_only_trickle", "trickle=2:0.05:30,first=1", "stall_after=1:1,first=1", "message", ("s", "n")),
    Case("html_200", "html,first=1", "html,first=1", "message", ("s", "n")),
    Case(
        "truncated_before_content",
        "truncate_after=2,first=1",
        "truncate_after=1,first=1",
        "message",
        ("s", "n"),
    ),
    Case("truncated_after_content", "truncate_after=5", "truncate_after=4", "error", ("s",)),
    Case(  # message_start (and a ping), then the API's overloaded_error event: nothing reached the client
        "overloaded_before_content",
        "overloaded_after=2,first=1",
        "overloaded_after=1,first=1",
        "message",
        ("s", "n"),
    ),
    Case("reset_before_answer", "reset,first=1", "reset,first=1", "message", ("s", "s")),
    Case("reset_mid_stream", "reset_after=5", "reset_after=4", "error", ("s",)),
    Case("overloaded_3x_then_ok", "fail_first=3:529", "fail_first=3:529", "message", ("s", "s", "s", "s")),
    Case(
        "rate_limited_retry_after_ms",
        "fail_first=1:429,retry_after_ms=5",
        "fail_first=1:429,retry_after_ms=5",
        "message",
        ("s", "s"),
    ),
    Case(
        "rate_limited_retry_after",
        "fail_first=1:429,retry_after=0.01",
        "fail_first=1:429,retry_after=0.01",
        "message",
        ("s", "s"),
    ),
    Case("stall_before_headers", "stall_headers=1,first=1", "stall_headers=1,first=1", "message", ("s", "s")),
    Case(
        "overloaded_non_streaming",
        "fail_first=2:529",
        "fail_first=2:529",
        "message",
        ("n", "n", "n"),
        streaming=False,
    ),
]


@dataclass
class Result:
    provider: str
    case: str
    seconds: float
    ok: bool
    hung: int


RESULTS: list[Result] = []


async def _call(stack: ProviderStack, fault: str, key: str, streaming: bool) -> anthropic.types.Message:
    client = stack.client(**{"x-emulator-fault": fault, "x-emulator-fault-key": key})
    client = client.with_options(timeout=10)
    try:
        messages = [{"role": "user", "content": "Tell me about the weather"}]
        if not streaming:
            return await client.messages.create(model=MODEL, max_tokens=64, messages=messages)  # type: ignore[arg-type]
        async with client.messages.stream(model=MODEL, max_tokens=64, messages=messages) as stream:  # type: ignore[arg-type]
            return await stream.get_final_message()
    finally:
        await client.close()


def _calls(stack: ProviderStack) -> tuple[str, ...]:
    kinds = []
    for request in stack.model_requests():
        if stack.provider == "bedrock":
            kinds.append("s" if request.path.endswith("invoke-with-response-stream") else "n")
        elif stack.provider == "vertex":
            kinds.append("s" if request.path.endswith(":streamRawPredict") else "n")
        else:
            kinds.append("s" if orjson.loads(request.body).get("stream") is True else "n")
    return tuple(kinds)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_fault(provider: str, case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fault = case.bedrock_fault if provider == "bedrock" and case.bedrock_fault else case.fault
    async with provider_stack(provider, tmp_path, monkeypatch, **FAST) as stack:
        clock = asyncio.get_running_loop().time
        started = clock()
        outcome = "message"
        try:
            message = await _call(stack, fault, f"{provider}-{case.name}", case.streaming)
            assert message.stop_reason == "end_turn" and message.content
        except anthropic.APIStatusError as exc:
            outcome = "error"
            body = exc.body
            assert isinstance(body, dict) and body.get("type") == "error", body
            assert isinstance(body["error"].get("type"), str) and body["error"].get("message")
        elapsed = clock() - started
        for _ in range(200):
            if stack.gateway.open_connections == 0:
                break
            await asyncio.sleep(0.01)
        hung = stack.gateway.open_connections
        RESULTS.append(Result(provider, case.name, elapsed, outcome == case.outcome, hung))
        assert outcome == case.outcome
        assert _calls(stack) == case.upstream_calls
        assert elapsed < BOUND_S
        assert hung == 0


async def test_bedrock_exception_frame_mid_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with provider_stack("bedrock", tmp_path, monkeypatch, **FAST) as stack:
        client = stack.client(**{"x-emulator-scenario": "stream_error"})
        with pytest.raises(anthropic.APIStatusError) as info:
            async with client.messages.stream(
                model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "hi"}]
            ) as stream:
                await stream.get_final_message()
        await client.close()
        assert info.value.body["error"]["type"] in ("rate_limit_error", "api_error", "overloaded_error")  # type: ignore[index]
        assert _calls(stack) == ("s",)


async def test_vertex_resource_exhausted_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with provider_stack("vertex", tmp_path, monkeypatch, **FAST) as stack:
        message = await _call(stack, "fail_first=2:429", "vertex-quota", streaming=True)
        assert message.stop_reason == "end_turn"
        assert _calls(stack) == ("s", "s", "s")
        assert 'reason="status_429"' in stack.metrics.exposition().decode()


async def test_expired_token_refreshed_and_retried_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Vertex: a 401 makes the provider fetch a new OAuth token and retry exactly once."""
    async with provider_stack("vertex", tmp_path, monkeypatch, **FAST) as stack:
        message = await _call(stack, "unauthorized_once", "vertex-expired", streaming=True)
        assert message.stop_reason == "end_turn"
        assert _calls(stack) == ("s", "s")
        assert 'reason="credential_refresh"' in stack.metrics.exposition().decode()


@pytest.mark.parametrize("provider", ["anthropic", "bedrock", "foundry"])
async def test_unchanged_static_credential_is_not_retried(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Static keys re-read unchanged: retrying would fail the same way, so the 401 goes to the
    client at once with x-should-retry: false (Bedrock's rotated-key retry is tested in
    tests/providers/test_bedrock_credentials.py)."""
    async with provider_stack(provider, tmp_path, monkeypatch, **FAST) as stack:
        try:
            message = await _call(stack, "unauthorized_once", f"{provider}-expired", streaming=True)
        except anthropic.AuthenticationError:
            message = None
        seen = [(r.method, r.path, r.header("x-emulator-fault-key")) for r in stack.emulator.requests]
        assert message is None, seen
        assert _calls(stack) == ("s",)


def summary() -> list[str]:
    if not RESULTS:
        return []
    lines = [
        f"fault matrix: {len(RESULTS)} cases, requests lost: {sum(not r.ok for r in RESULTS)}, "
        f"hung connections: {sum(r.hung for r in RESULTS)}"
    ]
    worst: dict[str, float] = {}
    for r in RESULTS:
        worst[r.case] = max(worst.get(r.case, 0.0), r.seconds)
    lines += [f"  {name:<30} worst {seconds * 1000:7.0f} ms" for name, seconds in worst.items()]
    return lines
