"""Who a signed-in user is, against the real OIDC IdP (npm oauth2-mock-server): an e-mail the IdP
has not verified is not an identity."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.fleet_signin.signin_stack import claims_of, signin_stack

# alice's own entry refuses everything; a stranger falls to the open base
POLICY = "users: [{user: alice@example.com, spend_caps: {daily_usd: 0}}]\n"


async def test_an_unverified_email_is_not_used_as_identity(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    async with signin_stack(tmp_path, GATEWAY_POLICY_FILE=str(policy)) as stack:
        # mallory tells the IdP she is alice@example.com; the IdP says it has not verified that
        stack.idp.set_user(sub="idp|mallory", email="alice@example.com", email_verified=False)
        tokens = await stack.sign_in()
        claims = claims_of(tokens["access_token"])
        assert claims["sub"] == "idp|mallory" and "email" not in claims
        status, _, body = await stack.message(tokens["access_token"])
        assert status == 200, body  # not alice's policy entry (her cap is 0)
        # an IdP that leaves email_verified out is taken at its word (today's behaviour)
        stack.idp.set_user(sub="idp|alice", email="alice@example.com", email_verified=None)
        alice = await stack.sign_in()
        assert claims_of(alice["access_token"])["email"] == "alice@example.com"
        status, _, body = await stack.message(alice["access_token"])
        assert status == 429 and body["error"]["type"] == "billing_error", body


def guids(count: int) -> list[str]:
    return [str(uuid.UUID(int=index)) for index in range(count)]


async def test_a_user_in_many_groups_gets_a_token_with_the_groups_in_use(tmp_path: Path) -> None:
    many = guids(160)  # Entra ID style: the whole list would make a ~8.5 KB bearer (431)
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"admin_groups: ['{many[7]}']\ngroups: [{{group: '{many[99]}', spend_caps: {{daily_usd: 5}}}}]\n")
    async with signin_stack(tmp_path, GATEWAY_POLICY_FILE=str(policy)) as stack:
        stack.idp.set_user(groups=many)
        tokens = await stack.sign_in()
        # the first group (the telemetry label without GATEWAY_TELEMETRY_GROUPS) and the policy's
        assert claims_of(tokens["access_token"])["groups"] == [many[0], many[7], many[99]]
        status, headers, body = await stack.message(tokens["access_token"])
        assert status == 200, body
        assert headers["anthropic-ratelimit-unified-status"] == "allowed"  # many[99]'s cap applies
        async with stack.http.get(
            f"{stack.gateway_url}/v1/organizations/spend_limits",
            headers={"authorization": f"Bearer {tokens['access_token']}"},
        ) as response:
            assert response.status == 200  # an admin through many[7]
        status, refreshed = await stack.refresh(tokens["refresh_token"])
        assert status == 200 and len(claims_of(refreshed["access_token"])["groups"]) == 3


async def test_a_token_that_would_not_fit_a_header_is_refused_at_sign_in(tmp_path: Path) -> None:
    many = guids(40)
    policy = tmp_path / "policy.yaml"
    policy.write_text("groups: [" + ", ".join(f"{{group: '{g}'}}" for g in many) + "]\n")
    async with signin_stack(tmp_path, GATEWAY_POLICY_FILE=str(policy), GATEWAY_MAX_HEADER_BYTES="1024") as stack:
        stack.idp.set_user(groups=many[:5])
        assert (await stack.sign_in())["access_token"]  # five fit
        stack.idp.set_user(groups=many)  # forty named by the policy do not
        device = await stack.start_device()
        browser = stack.browser()
        async with browser.session:
            entry = await browser.open(device["verification_uri_complete"])
            refused = await browser.submit(entry)
        assert refused.status == 403, refused.text
        assert "over its request-header limit of 1024 bytes" in refused.text
        assert "40 groups" in refused.text
        assert (await stack.poll(device["device_code"]))[1]["error"] == "authorization_pending"


async def test_an_admin_cap_names_an_email_in_any_case(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("admin_groups: [platform]\nusers: [{user: Alice@Example.com, spend_caps: {daily_usd: 50}}]\n")
    async with signin_stack(tmp_path, GATEWAY_POLICY_FILE=str(policy)) as stack:
        alice = (await stack.sign_in())["access_token"]  # alice@example.com, in platform
        limits = f"{stack.gateway_url}/v1/organizations/spend_limits"
        headers = {"authorization": f"Bearer {alice}"}
        change = {"scope": "user", "owner": "ALICE@example.COM", "period": "daily", "limit_usd": 0}
        async with stack.http.put(limits, json=change, headers=headers) as response:
            assert response.status == 200
            answer = await response.json()
        assert (answer["owner"], answer["previous_usd"]) == ("alice@example.com", 50)  # her file entry's
        status, _, body = await stack.message(alice)
        assert status == 429 and body["error"]["type"] == "billing_error", body
        async with stack.http.get(limits, headers=headers) as response:
            rows = [row for row in (await response.json())["data"] if row["scope"] == "user"]
        assert [(r["owner"], r["limit_usd"], r["source"]) for r in rows] == [("Alice@Example.com", 0, "admin")]
