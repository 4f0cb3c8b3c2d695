"""Two gateway replicas sharing sign-in state through a real redis-server: the signing key
generated once (no keys file) and shared, a grant started on one redeemed on the other, refresh
rotation and reuse detection across replicas, and a revocation made on one replica holding on the
other within the denylist's re-read interval."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.fleet_signin.signin_stack import DEVICE_GRANT, signin_stack
from tests.support.redis_server import running_redis

REVOCATION_BOUND_S = 10.0  # the denylist is re-read every second; generous on a loaded machine


async def test_two_replicas_share_sign_in_state_through_redis(tmp_path: Path) -> None:
    with running_redis() as redis:
        env = {"GATEWAY_SESSION_STORE": redis.url, "GATEWAY_TOKEN_SIGNING_KEYS_FILE": ""}
        async with signin_stack(tmp_path, replicas_count=2, **env) as stack:
            first, second = stack.replica_urls
            device = await stack.start_device()  # on the first replica
            await stack.approve_in_browser(device)
            status, tokens = await stack.form_post(
                f"{second}/oauth/token", {"grant_type": DEVICE_GRANT, "device_code": device["device_code"]}
            )
            assert status == 200, tokens
            bearer = tokens["access_token"]
            for url in stack.replica_urls:  # one generated key, shared: both verify the token
                stack.gateway_url = url
                assert (await stack.message(bearer))[0] == 200

            status, refreshed = await stack.form_post(
                f"{second}/oauth/token",
                {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]},
            )
            assert status == 200, refreshed
            status, reused = await stack.form_post(
                f"{first}/oauth/token",
                {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]},
            )
            assert (status, reused["error"]) == (401, "invalid_grant")

            other = await stack.sign_in()
            assert (await stack.form_post(f"{first}/oauth/revoke", {"token": other["access_token"]}))[
                0
            ] == 200
            stack.gateway_url = second
            started = time.monotonic()
            while (status := (await stack.message(other["access_token"]))[0]) == 200:
                assert time.monotonic() - started < REVOCATION_BOUND_S, (
                    "the revocation never reached the other replica"
                )
                await asyncio.sleep(0.1)
            assert status == 401
