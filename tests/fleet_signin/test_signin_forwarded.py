"""The sign-in's per-IP limits behind a real reverse proxy that reports clients in the RFC 7239
``Forwarded`` header (``GATEWAY_TRUSTED_PROXY_HEADER=forwarded``): squid in accel mode adds
``Forwarded: for=<client>`` (``request_header_add``) as its own header line. Two users on
different loopback addresses behind it get separate buckets, a client's own ``Forwarded`` line
cannot pick its bucket, and X-Forwarded-For is then not read at all (the header is configured,
never guessed)."""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from tests.fleet_signin.signin_stack import SigninStack, custom_signin_stack
from tests.support.squid import run_reverse_squid

ALICE_IP = "127.0.0.7"
BOB_IP = "127.0.0.8"
# squid's own line, after whatever the client sent; %>a: the client's address (IPv4 here: a token)
SQUID_FORWARDED = 'forwarded_for delete\nvia off\nrequest_header_add Forwarded "for=%>a;proto=http"'


async def submit_code(url: str, source: str, headers: dict[str, str] | None = None) -> int:
    """One verification-page form submission from ``source`` (no session: a CSRF refusal, counted)."""
    connector = aiohttp.TCPConnector(local_addr=(source, 0))
    form = {"user_code": "WDJB-MJHT"}
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(f"{url}/oauth/device", data=form, headers=headers) as response,
    ):
        return response.status


async def test_users_behind_a_forwarded_proxy_get_their_own_buckets(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="switchyard.audit")
    env = {
        "GATEWAY_TRUSTED_PROXIES": "127.0.0.1/32",
        "GATEWAY_TRUSTED_PROXY_HEADER": "forwarded",
        "GATEWAY_SIGNIN_VERIFY_PER_MINUTE": "2",
    }
    async with custom_signin_stack(tmp_path, env) as stack:
        gateway_port = urlsplit(stack.gateway_url).port
        assert gateway_port is not None
        async with run_reverse_squid(gateway_port, SQUID_FORWARDED) as squid:
            ingress = f"http://127.0.0.1:{squid.port}"
            assert [await submit_code(ingress, ALICE_IP) for _ in range(2)] == [403, 403]
            assert await submit_code(ingress, ALICE_IP) == 429
            # Alice's own Forwarded line (and an unclosed quote) cannot get her a fresh bucket
            for spoof in ("for=203.0.113.1", 'for="203.0.113.2', "for=203.0.113.3, for=unknown"):
                assert await submit_code(ingress, ALICE_IP, {"Forwarded": spoof}) == 429
            # Bob, behind the same proxy address, has his own bucket
            assert [await submit_code(ingress, BOB_IP) for _ in range(3)] == [403, 403, 429]
        await direct_x_forwarded_for_is_not_read(stack)
    audit = [record.getMessage() for record in caplog.records if record.name == "switchyard.audit"]
    assert f"signin.refused reason=rate_limited ip={ALICE_IP}" in audit
    assert f"signin.refused reason=rate_limited ip={BOB_IP}" in audit
    assert not [line for line in audit if "203.0.113." in line or "198.51.100." in line]


async def direct_x_forwarded_for_is_not_read(stack: SigninStack) -> None:
    """The trusted peer itself sending X-Forwarded-For: ignored, every request is its own (fresh) bucket."""
    statuses = [
        await submit_code(stack.gateway_url, "127.0.0.1", {"X-Forwarded-For": f"198.51.100.{n}"})
        for n in range(3)
    ]
    assert statuses == [403, 403, 429]
