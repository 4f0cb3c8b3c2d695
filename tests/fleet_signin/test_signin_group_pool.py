"""A group pool over HTTP with users signed in through the whole flow (real IdP, device grant,
verification page): two members of ``eng`` share one monthly pool; ann spends part, bob the rest,
then both get the 429 ``billing_error`` with exactly the headers of fleet-gateway.md s4 (and
``-overage-scope: group_pool``), while a user of another group still passes. (The same rule on the
gate alone, in memory and in Redis: tests/fleet/test_counters_redis.py.)"""

from __future__ import annotations

import calendar
import time
from datetime import UTC, datetime
from pathlib import Path

import anthropic

from emulators import EmulatorConfig, run_emulator
from gateway.pricing import DEFAULT_TABLE
from gateway.streaming.usage import Usage
from tests.fleet_signin.signin_stack import assert_error_shape, signin_stack

U = "anthropic-ratelimit-unified-"
PROBE_KEY = "sk-ant-probe"


async def cost_of_one_message() -> tuple[float, tuple[int, int]]:
    """What the emulator charges for ``SigninStack.message``'s body (its usage is deterministic)."""
    async with (
        run_emulator(EmulatorConfig(api_keys=frozenset({PROBE_KEY})), port=0) as emulator,
        anthropic.AsyncAnthropic(api_key=PROBE_KEY, base_url=emulator.base_url, max_retries=0) as client,
    ):
        reply = await client.messages.create(
            model="claude-sonnet-4-5", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
    usage = (reply.usage.input_tokens, reply.usage.output_tokens)
    return DEFAULT_TABLE.cost("anthropic", "claude-sonnet-4-5", Usage(*usage)).total, usage


def next_month_start(now: float) -> int:
    today = datetime.fromtimestamp(now, UTC)
    year, month = (today.year + 1, 1) if today.month == 12 else (today.year, today.month + 1)
    return calendar.timegm((year, month, 1, 0, 0, 0))


async def test_a_group_pool_blocks_two_signed_in_users_together(tmp_path: Path) -> None:
    cost, usage = await cost_of_one_message()
    cap = cost * 2.5  # ann: 1 request (40 %), bob: 2 more (80 %, then 120 % > the pool)
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"groups: [{{group: eng, pool: {{monthly_usd: {cap!r}}}}}, {{group: sales}}]\n")
    async with signin_stack(tmp_path, GATEWAY_POLICY_FILE=str(policy)) as stack:
        bearers = {}
        for name, groups in (("ann", ["eng"]), ("bob", ["eng", "platform"]), ("cat", ["sales"])):
            stack.idp.set_user(sub=f"idp|{name}", email=f"{name}@example.com", groups=groups)
            bearers[name] = (await stack.sign_in())["access_token"]

        status, headers, body = await stack.message(bearers["ann"])
        assert status == 200, body
        assert (body["usage"]["input_tokens"], body["usage"]["output_tokens"]) == usage
        assert headers[U + "status"] == "allowed" and headers[U + "overage-utilization"] == "0"
        assert U + "overage-surpassed-threshold" not in headers
        seen = []
        for _ in range(2):
            status, headers, body = await stack.message(bearers["bob"])
            assert status == 200, body
            seen.append(
                (
                    headers[U + "status"],
                    headers[U + "overage-utilization"],
                    headers.get(U + "overage-surpassed-threshold"),
                    headers[U + "representative-claim"],
                )
            )
        assert seen == [("allowed", "0.4", None, "overage"), ("allowed_warning", "0.8", "0.75", "overage")]
        before = len(stack.emulator.requests)
        reset = next_month_start(time.time())
        for name in ("ann", "bob"):
            status, raw, body = await stack.message(bearers[name])
            headers = {key.lower(): value for key, value in raw.items()}
            assert status == 429, body
            assert_error_shape(body, "billing_error")
            assert "resets" in body["error"]["message"]
            assert abs(int(headers["retry-after"]) - (reset - time.time())) <= 5
            assert headers["x-should-retry"] == "false"
            assert headers[U + "status"] == "rejected"
            assert headers[U + "reset"] == headers[U + "overage-reset"] == str(reset)
            assert headers[U + "overage-utilization"] == "1"
            assert headers[U + "overage-surpassed-threshold"] == "1"
            assert headers[U + "overage-period"] == "monthly"
            assert headers[U + "overage-disabled-reason"] == "org_spend_cap_reached"
            assert headers[U + "overage-scope"] == "group_pool"
            assert U + "representative-claim" not in headers and U + "overage-status" not in headers
        assert len(stack.emulator.requests) == before  # refused before proxying
        status, headers, body = await stack.message(bearers["cat"])  # another group: not this pool
        assert status == 200, body
        assert U + "status" not in headers
