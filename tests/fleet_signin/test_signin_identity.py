"""Who a signed-in user is, against the real OIDC IdP (npm oauth2-mock-server): an e-mail the IdP
has not verified is not an identity."""

from __future__ import annotations

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
