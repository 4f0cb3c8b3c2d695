"""Sign-in end to end against a real OIDC IdP (npm oauth2-mock-server) on loopback: discovery,
device authorization, the verification page driven like a browser, the IdP login (PKCE, nonce),
the token endpoint, refresh with rotation, reuse detection and a group change at the IdP,
deprovisioning, RFC 7009 revocation, and the 401 a revoked bearer gets (x-should-retry: false).
Expiry and polling speed run on a wall clock the test moves (no sleeping)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from tests.fleet_signin.signin_stack import (
    ALICE,
    CLIENT_ID,
    STATIC_KEY,
    assert_error_shape,
    claims_of,
    signin_stack,
)

USER_CODE = re.compile(r"^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$")


def audit_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "switchyard.audit"]


async def test_device_flow_from_discovery_to_a_model_call(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="switchyard.audit")
    async with signin_stack(tmp_path) as stack:
        base = stack.gateway_url
        meta = stack.metadata
        assert meta["device_authorization_endpoint"] == f"{base}/oauth/device_authorization"
        assert meta["token_endpoint"] == f"{base}/oauth/token"
        assert meta["revocation_endpoint"] == f"{base}/oauth/revoke"
        assert meta["gateway_protocol_version"] == 1
        assert "authorization_endpoint" not in meta

        # no client_id, an unknown parameter: still a grant
        status, device = await stack.form_post(
            meta["device_authorization_endpoint"], {"surface": "claude_code", "x-unknown": "1"}
        )
        assert status == 200, device
        assert USER_CODE.match(device["user_code"]), device["user_code"]
        assert len(device["device_code"]) >= 43  # 256 bits, base64url
        assert (device["expires_in"], device["interval"]) == (600, 5)
        assert device["verification_uri"] == f"{base}/oauth/device"
        assert device["verification_uri_complete"].startswith(device["verification_uri"])

        # polling: pending, too fast → slow_down, then at the longer interval pending again
        assert await stack.poll(device["device_code"]) == (
            400,
            {
                "error": "authorization_pending",
                "error_description": "the user has not approved the sign-in yet",
            },
        )
        status, body = await stack.poll(device["device_code"])
        assert (status, body["error"]) == (400, "slow_down")
        stack.clock.advance(6)  # 5 + 5 after the slow_down: still too fast
        assert (await stack.poll(device["device_code"]))[1]["error"] == "slow_down"
        stack.clock.advance(16)
        assert (await stack.poll(device["device_code"]))[1]["error"] == "authorization_pending"

        # the pre-filled code is not submitted by the page itself: a form and no script
        browser = stack.browser()
        async with browser.session:
            entry = await browser.open(device["verification_uri_complete"])
            assert entry.status == 200 and entry.scripts == 0 and "http-equiv" not in entry.text
            assert (
                entry.forms[0].method == "post" and entry.forms[0].fields["user_code"] == device["user_code"]
            )
            confirm = await browser.submit(entry)  # → IdP authorize → /oauth/callback → confirmation
            assert (
                confirm.status == 200
                and device["user_code"] in confirm.text
                and "alice@example.com" in confirm.text
            )
            assert ("decision", "approve") in confirm.forms[0].buttons
            done = await browser.submit(confirm, button=("decision", "approve"))
            assert done.status == 200 and "signed in" in done.text.lower()

        # the IdP saw a PKCE S256 authorization-code flow with a nonce, and the verifier at its token endpoint
        authorize = [event for event in stack.idp.events() if event["event"] == "authorize"][-1]["query"]
        assert authorize["code_challenge_method"] == "S256" and authorize["nonce"] and authorize["state"]
        assert authorize["client_id"] == CLIENT_ID and authorize["redirect_uri"] == f"{base}/oauth/callback"
        assert any(event["event"] == "token" and event["has_code_verifier"] for event in stack.idp.events())

        stack.clock.advance(30)
        status, tokens = await stack.poll(device["device_code"])
        assert status == 200, tokens
        assert (
            tokens["token_type"] == "Bearer"
            and tokens["expires_in"] == 3600
            and tokens["email"] == "alice@example.com"
        )
        claims = claims_of(tokens["access_token"])
        # groups: only those the gateway reads (no policy: the first, the telemetry label)
        assert claims["sub"] == "idp|alice" and claims["groups"] == ["eng"]
        assert claims["email"] == "alice@example.com" and claims["exp"] - claims["iat"] == 3600
        stack.clock.advance(30)
        assert (await stack.poll(device["device_code"]))[1]["error"] == "invalid_grant"  # single use

        # the bearer works on the Messages API, and static keys keep working beside it
        status, _, body = await stack.message(tokens["access_token"])
        assert status == 200, body
        status, _, body = await stack.message(STATIC_KEY)
        assert status == 200, body
        assert len(stack.emulator.requests) == 2

    lines = audit_lines(caplog)
    assert any(line.startswith("signin.approved") and "idp|alice" in line for line in lines), lines
    assert any(line.startswith("signin.token_issued") for line in lines), lines
    for secret in (
        tokens["access_token"],
        tokens["refresh_token"],
        device["device_code"],
        device["user_code"],
    ):
        assert all(secret not in line for line in lines)


async def test_refresh_rotates_sees_group_changes_and_detects_reuse(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="switchyard.audit")
    async with signin_stack(tmp_path) as stack:
        first = await stack.sign_in()
        stack.idp.set_user(groups=["ml-research", "eng"])  # changed at the IdP
        status, second = await stack.refresh(first["refresh_token"])
        assert status == 200, second
        assert second["refresh_token"] != first["refresh_token"]
        assert claims_of(second["access_token"])["groups"] == ["ml-research"]  # the first (label)
        assert [event["grant_type"] for event in stack.idp.events() if event["event"] == "token"][
            -1
        ] == "refresh_token"
        assert (await stack.message(second["access_token"]))[0] == 200

        # the old refresh token again: reuse → the family is revoked, with its latest access token
        status, body = await stack.refresh(first["refresh_token"])
        assert (status, body["error"]) == (401, "invalid_grant")
        assert (await stack.refresh(second["refresh_token"]))[0] == 401
        status, headers, body = await stack.message(second["access_token"])
        assert status == 401 and headers["x-should-retry"] == "false"
        assert_error_shape(body, "authentication_error")
    assert any(line.startswith("signin.refresh_reuse_detected") for line in audit_lines(caplog))


async def test_revocation_of_access_and_refresh_tokens(tmp_path: Path) -> None:
    async with signin_stack(tmp_path) as stack:
        tokens = await stack.sign_in()
        revoke = stack.metadata["revocation_endpoint"]
        assert (await stack.message(tokens["access_token"]))[0] == 200
        assert (await stack.form_post(revoke, {"token": tokens["access_token"]}))[0] == 200
        status, headers, body = await stack.message(tokens["access_token"])
        assert status == 401 and headers["x-should-retry"] == "false", body
        assert_error_shape(body, "authentication_error")
        assert "revoked" in body["error"]["message"]

        status, _ = await stack.form_post(
            revoke, {"token": tokens["refresh_token"], "token_type_hint": "refresh_token"}
        )
        assert status == 200
        assert await stack.refresh(tokens["refresh_token"]) == (
            401,
            {
                "error": "invalid_grant",
                "error_description": "the sign-in is no longer valid: run /login again",
            },
        )
        status, headers, body = await stack.message("not.a-token.of-ours")
        assert status == 401 and headers["x-should-retry"] == "false"
        assert body["error"]["message"].startswith("invalid or expired access token")
        async with stack.http.get(
            f"{stack.gateway_url}/metrics", headers={"authorization": f"Bearer {tokens['access_token']}"}
        ) as response:
            assert response.status in (401, 403)  # a sign-in bearer never reads /metrics
        # RFC 7009 §2.2: an unknown token is answered 200 as well
        assert (await stack.form_post(revoke, {"token": "not-a-token"}))[0] == 200


async def test_a_user_disabled_at_the_idp_cannot_refresh(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="switchyard.audit")
    async with signin_stack(tmp_path) as stack:
        tokens = await stack.sign_in()
        stack.idp.set_user(disabled=True)
        status, body = await stack.refresh(tokens["refresh_token"])
        assert (status, body["error"]) == (401, "invalid_grant")
        assert (await stack.message(tokens["access_token"]))[0] == 401  # its access token went with it
    assert any(line.startswith("signin.deprovisioned") for line in audit_lines(caplog))


async def test_expired_grant_denied_grant_and_expired_access_token(tmp_path: Path) -> None:
    async with signin_stack(tmp_path, GATEWAY_ACCESS_TOKEN_TTL_S="120") as stack:
        device = await stack.start_device()
        stack.clock.advance(601)
        assert (await stack.poll(device["device_code"]))[1]["error"] == "expired_token"

        device = await stack.start_device()
        denied = await stack.approve_in_browser(device, decision="deny")
        assert denied.status == 200 and "denied" in denied.text.lower()
        assert (await stack.poll(device["device_code"]))[1]["error"] == "access_denied"

        tokens = await stack.sign_in()
        assert (await stack.message(tokens["access_token"]))[0] == 200
        stack.clock.advance(121)
        status, headers, body = await stack.message(tokens["access_token"])
        assert status == 401 and headers["x-should-retry"] == "false"
        assert_error_shape(body, "authentication_error")
        status, refreshed = await stack.refresh(tokens["refresh_token"])  # a refresh still works
        assert status == 200, refreshed
        assert (await stack.message(refreshed["access_token"]))[0] == 200


async def test_csrf_and_rate_limit_refusals(tmp_path: Path) -> None:
    async with signin_stack(tmp_path, GATEWAY_SIGNIN_VERIFY_PER_MINUTE="2") as stack:
        device = await stack.start_device()
        browser = stack.browser()
        async with browser.session:
            entry = await browser.open(device["verification_uri"])
            forged = await browser.submit(entry, csrf="0" * 64, user_code=device["user_code"])
            assert forged.status == 403
            wrong = await browser.submit(entry, user_code="BBBB-BBBB")
            assert wrong.status == 400 and "not valid" in wrong.text
            limited = await browser.submit(entry, user_code=device["user_code"])
            assert limited.status == 429
            stack.clock.advance(61)  # a minute later the same browser may try again
            confirm = await browser.submit(entry, user_code=device["user_code"])
            assert confirm.status == 200 and device["user_code"] in confirm.text
        # a form posted without the browser's session cookie (another site) is refused
        async with stack.http.post(
            f"{stack.gateway_url}/oauth/device", data={"user_code": device["user_code"], "csrf": "x"}
        ) as response:
            assert response.status == 403
        assert (await stack.poll(device["device_code"]))[1]["error"] == "authorization_pending"


async def test_email_domain_allowlist(tmp_path: Path) -> None:
    async with signin_stack(tmp_path, GATEWAY_SIGNIN_EMAIL_DOMAINS="corp.example") as stack:
        device = await stack.start_device()
        browser = stack.browser()
        async with browser.session:
            entry = await browser.open(device["verification_uri_complete"])
            refused = await browser.submit(entry)
            assert refused.status == 403 and "example.com may not sign in" in refused.text
        assert (await stack.poll(device["device_code"]))[1]["error"] == "authorization_pending"


async def test_oauth_endpoints_answer_bad_input_in_the_oauth_shape(tmp_path: Path) -> None:
    async with signin_stack(tmp_path) as stack:
        token = stack.metadata["token_endpoint"]
        cases = [
            ({"grant_type": "password", "username": "u"}, 400, "unsupported_grant_type"),
            ({"grant_type": "urn:ietf:params:oauth:grant-type:device_code"}, 400, "invalid_request"),
            (
                {"grant_type": "urn:ietf:params:oauth:grant-type:device_code", "device_code": "x" * 43},
                400,
                "invalid_grant",
            ),
            ({"grant_type": "refresh_token", "refresh_token": "no-dot"}, 401, "invalid_grant"),
            ({"grant_type": "refresh_token", "refresh_token": "fam.secret"}, 401, "invalid_grant"),
        ]
        for form, status, error in cases:
            got_status, body = await stack.form_post(token, form)
            assert (got_status, body.get("error")) == (status, error), (form, body)
        headers = {"content-type": "application/x-www-form-urlencoded"}
        for raw in (b"\xff\xfe=\xff", b"grant_type=" + b"a" * 20_000):
            async with stack.http.post(token, data=raw, headers=headers) as response:
                assert response.status == 400 and (await response.json())["error"] == "invalid_request"
                assert response.headers["cache-control"] == "no-store"
        async with stack.http.post(stack.metadata["revocation_endpoint"], data={}) as response:
            assert response.status == 400 and (await response.json())["error"] == "invalid_request"
        async with stack.http.get(token) as response:  # the gateway's own 405, Anthropic-shaped
            assert response.status == 405


async def test_signed_in_users_are_one_bounded_metrics_label(tmp_path: Path) -> None:
    """Per-team series stay bounded: a signed-in user's spend is labelled ``signed_in``, never
    with the user's e-mail or subject (per-user figures are the fleet series', bounded there)."""
    metrics_key = "sk-metrics-signin-3b1f"
    async with signin_stack(tmp_path, GATEWAY_METRICS_API_KEYS=metrics_key) as stack:
        tokens = await stack.sign_in()
        assert (await stack.message(tokens["access_token"]))[0] == 200
        async with stack.http.get(
            f"{stack.gateway_url}/metrics", headers={"x-api-key": metrics_key}
        ) as response:
            assert response.status == 200
            exposition = await response.text()
    assert 'team="signed_in"' in exposition
    assert 'gateway_fleet_signins_total{outcome="success"} 1.0' in exposition  # the Fleet dashboard's
    assert "alice" not in exposition and ALICE["sub"] not in exposition
