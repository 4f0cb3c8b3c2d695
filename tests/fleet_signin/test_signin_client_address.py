"""The sign-in's per-IP limits behind an ingress (``GATEWAY_TRUSTED_PROXIES``), over HTTP: two users
behind one trusted proxy address get separate buckets; an untrusted peer's X-Forwarded-For is
ignored, so a spoofer cannot get a fresh bucket. The test client on 127.0.0.1 plays the ingress."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway.fleet.signin_service import DEVICE_STARTS_PER_MINUTE
from tests.fleet_signin.signin_stack import SigninStack, custom_signin_stack, signin_stack

ALICE_IP = "198.51.100.7"
BOB_IP = "2001:db8::b0b"


async def submit_code(stack: SigninStack, forwarded_for: str | None) -> int:
    """One verification-page form submission (no session: past the limit it is a CSRF refusal)."""
    headers = {"x-forwarded-for": forwarded_for} if forwarded_for is not None else {}
    async with stack.http.post(
        f"{stack.gateway_url}/oauth/device", data={"user_code": "WDJB-MJHT"}, headers=headers
    ) as response:
        return response.status


async def start_device(stack: SigninStack, forwarded_for: str) -> int:
    async with stack.http.post(
        stack.metadata["device_authorization_endpoint"],
        data={"surface": "claude_code"},
        headers={"x-forwarded-for": forwarded_for},
    ) as response:
        return response.status


async def test_users_behind_a_trusted_ingress_get_their_own_buckets(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="switchyard.audit")
    env = {"GATEWAY_TRUSTED_PROXIES": "127.0.0.1/32, ::1", "GATEWAY_SIGNIN_VERIFY_PER_MINUTE": "2"}
    async with custom_signin_stack(tmp_path, env) as stack:
        assert [await submit_code(stack, ALICE_IP) for _ in range(2)] == [403, 403]  # csrf, counted
        assert await submit_code(stack, ALICE_IP) == 429
        # Alice spoofing a leftmost entry: the ingress appended her real address, still her bucket
        assert await submit_code(stack, f"203.0.113.1, {ALICE_IP}") == 429
        # Bob, behind the same ingress address, has his own bucket
        assert [await submit_code(stack, BOB_IP) for _ in range(3)] == [403, 403, 429]
        # without the header a trusted peer is its own client (its bucket is fresh too)
        assert await submit_code(stack, None) == 403
        # the device-authorization limit counts per user as well
        statuses = [await start_device(stack, ALICE_IP) for _ in range(DEVICE_STARTS_PER_MINUTE + 1)]
        assert statuses == [200] * DEVICE_STARTS_PER_MINUTE + [429]
        assert await start_device(stack, BOB_IP) == 200
    audit = [record.getMessage() for record in caplog.records if record.name == "switchyard.audit"]
    assert f"signin.refused reason=rate_limited ip={ALICE_IP}" in audit
    assert f"signin.refused reason=rate_limited ip={BOB_IP}" in audit
    assert not [line for line in audit if "203.0.113.1" in line]


async def test_an_untrusted_peer_cannot_pick_its_bucket(tmp_path: Path) -> None:
    env = {"GATEWAY_TRUSTED_PROXIES": "10.0.0.0/8", "GATEWAY_SIGNIN_VERIFY_PER_MINUTE": "2"}
    async with custom_signin_stack(tmp_path, env) as stack:
        statuses = [await submit_code(stack, f"198.51.100.{n}") for n in range(4)]
        assert statuses == [403, 403, 429, 429]


async def test_without_trusted_proxies_the_header_is_ignored(tmp_path: Path) -> None:
    async with signin_stack(tmp_path, GATEWAY_SIGNIN_VERIFY_PER_MINUTE="2") as stack:
        statuses = [await submit_code(stack, f"198.51.100.{n}") for n in range(3)]
        assert statuses == [403, 403, 429]
