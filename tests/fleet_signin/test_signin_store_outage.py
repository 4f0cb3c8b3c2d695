"""Sign-in state in a Redis that hangs: every endpoint that needs the store answers 503 within the
store's timeout instead of hanging, tokens already issued keep working (they are self-contained),
the cause is logged without the Redis password, and sign-in works again once Redis answers.

The Redis is a real, password-protected redis-server frozen with ``SIGSTOP`` (connections stay open
and nothing answers: what a client without socket timeouts waits on forever) and thawed with
``SIGCONT``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from pathlib import Path

import pytest

from tests.fleet_signin.signin_stack import DEVICE_GRANT, signin_stack
from tests.support.redis_server import running_redis

PASSWORD = "signin-redis-pw-41d7"


async def until_logged(caplog: pytest.LogCaptureFixture, text: str, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not any(text in record.getMessage() for record in caplog.records):
        assert time.monotonic() < deadline, f"{text!r} never logged"
        await asyncio.sleep(0.1)
BOUND_S = 3.0  # two socket timeouts of 0.5 s, with room for a loaded machine


async def test_a_hung_store_gives_503s_not_hangs_and_issued_tokens_keep_working(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with running_redis(password=PASSWORD) as redis:
        env = {
            "GATEWAY_SESSION_STORE": redis.url,
            "GATEWAY_SESSION_STORE_TIMEOUT_S": "0.5",
            "GATEWAY_TOKEN_SIGNING_KEYS_FILE": "",  # the generated key lives in Redis too
        }
        async with signin_stack(tmp_path, **env) as stack:
            tokens = await stack.sign_in()
            assert (await stack.message(tokens["access_token"]))[0] == 200
            browser = stack.browser()
            entry_page = await browser.open(f"{stack.gateway_url}/oauth/device")  # (no store read)
            assert entry_page.status == 200 and entry_page.forms
            assert redis.process is not None
            os.kill(redis.process.pid, signal.SIGSTOP)
            try:
                caplog.set_level(logging.WARNING, "switchyard.fleet")
                started = time.monotonic()
                status, body = await stack.form_post("/oauth/device_authorization", {"client_id": "claude-code"})
                assert time.monotonic() - started < BOUND_S
                assert (status, body["error"]) == (503, "temporarily_unavailable"), body
                started = time.monotonic()
                status, body = await stack.refresh(tokens["refresh_token"])
                assert time.monotonic() - started < BOUND_S
                assert (status, body["error"]) == (503, "temporarily_unavailable"), body
                status, body = await stack.form_post(
                    "/oauth/token", {"grant_type": DEVICE_GRANT, "device_code": "not-a-known-code"}
                )
                assert status == 503, body
                # the browser's code entry reads the store too: a page, not JSON
                entered = await browser.submit(entry_page, user_code="WDJB-MJHT")
                assert entered.status == 503 and "Sign-in unavailable" in entered.text, entered.text[:500]
                # an issued access token needs no store: the API keeps serving it
                assert (await stack.message(tokens["access_token"]))[0] == 200
                await asyncio.sleep(2.5)  # the denylist's re-reads (every second) fail meanwhile
            finally:
                os.kill(redis.process.pid, signal.SIGCONT)
            logged = "\n".join(record.getMessage() for record in caplog.records)
            assert "the sign-in store (Redis) failed: TimeoutError" in logged
            assert logged.count("sign-in denylist sync failed") == 1  # once per outage, not per second
            assert PASSWORD not in logged
            status, body = await stack.refresh(tokens["refresh_token"])  # Redis answers again
            assert status == 200, body
            assert (await stack.message(body["access_token"]))[0] == 200
            await until_logged(caplog, "sign-in denylist sync works again")
