"""The admin API's spend listing finds a user's spend when the policy file names the user by e-mail.

Spend is counted per IdP subject; the policy file (and an admin) may name a user by e-mail. The
listing maps the name to the subject this replica has seen it used for, and says ``null`` (not a
wrong 0) for an e-mail it has not seen.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from gateway.fleet.admin_api import AdminApi
from gateway.fleet.counters import MemoryCounters
from gateway.fleet.policy import Policy
from gateway.fleet.policy_file import parse_policy
from gateway.fleet.policy_gate import PolicyGate
from gateway.fleet.policy_reload import PolicyHolder
from gateway.fleet.principal import Principal, Source
from gateway.providers.base import ClientRequest, Operation
from gateway.streaming.usage import Usage

POLICY = """
users:
  - {user: Alice@Example.com, spend_caps: {daily_usd: 100}}
  - {user: bob@example.com, spend_caps: {daily_usd: 50}}
  - {user: "idp|carol", spend_caps: {daily_usd: 10}}
"""


def _request() -> ClientRequest:
    payload = {"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    return ClientRequest(Operation.MESSAGES, None, payload, [], "req-1")


def _listing(gate: PolicyGate, admin: Principal) -> dict[str, Any]:
    api = AdminApi(gate, lambda request, groups: admin)
    response = asyncio.run(api.get_limits(None))  # type: ignore[arg-type]
    rows = json.loads(response.body)["data"]  # type: ignore[arg-type]
    return {row["owner"]: row["spent_usd"] for row in rows if row["scope"] == "user"}


def test_spend_of_users_named_by_email_and_by_subject() -> None:
    gate = PolicyGate(PolicyHolder(Policy(parse_policy(POLICY, "p.yaml"))), MemoryCounters())
    alice = Principal("idp|a1", "idp|a1", ("eng",), "alice@example.com", Source.TOKEN)
    carol = Principal("idp|carol", "idp|carol", ("eng",), "carol@example.com", Source.TOKEN)

    async def spend(principal: Principal, usd: float) -> None:
        admission = await gate.admit(principal, _request(), "r")
        assert admission is not None
        gate.record(admission, usd, Usage(10, 10))

    asyncio.run(spend(alice, 1.25))
    asyncio.run(spend(carol, 0.5))
    spent = _listing(gate, alice)
    assert spent["Alice@Example.com"] == 1.25  # found under alice's subject, whatever the case
    assert spent["idp|carol"] == 0.5  # a row named by subject, as before
    assert spent["bob@example.com"] is None  # never seen here: unknown, not a wrong 0
    assert gate.subject_of("ALICE@example.com") == "idp|a1"
    assert gate.subject_of("idp|someone") == "idp|someone"
