"""Sign-in reaches the company IdP the way upstream calls leave: through the corporate proxy
(Debian squid, with basic authentication and an ACL) and trusting the IdP's TLS certificate only
through ``GATEWAY_CA_BUNDLE``. The IdP is npm oauth2-mock-server serving HTTPS with a CA the test
generates; failures are a clear page for the user and one log line without the proxy's password.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.fleet_signin.signin_stack import ALICE, Browser, Page, SigninStack, claims_of, custom_signin_stack
from tests.support.oidc_idp import RunningIdp, running_idp
from tests.support.squid import Squid, run_squid
from tests.support.tls import LocalPKI, make_pki


def _port(idp: RunningIdp) -> int:
    port = urlsplit(idp.issuer).port
    assert port is not None
    return port


@contextlib.asynccontextmanager
async def tls_idp(tmp: Path) -> AsyncIterator[tuple[RunningIdp, LocalPKI]]:
    pki = make_pki(tmp)
    async with running_idp(tmp, tls=pki, **ALICE) as idp:
        assert idp.issuer.startswith("https://localhost:"), idp.issuer
        yield idp, pki


async def continue_on_code_page(stack: SigninStack) -> Page:
    """The user opens the verification page and presses Continue (the gateway then asks the IdP)."""
    device = await stack.start_device()
    async with stack.browser().session as session:
        browser = Browser(session)
        entry = await browser.open(device["verification_uri_complete"])
        assert entry.status == 200
        return await browser.submit(entry)


def fleet_log(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(record.getMessage() for record in caplog.records if record.name.startswith("switchyard"))


def assert_clean(caplog: pytest.LogCaptureFixture, *secrets: str) -> None:
    for record in caplog.records:
        assert record.exc_info is None, record.getMessage()
    text = fleet_log(caplog)
    assert "Traceback" not in text
    for secret in secrets:
        assert secret not in text


async def test_tls_idp_trusted_through_the_ca_bundle(tmp_path: Path) -> None:
    async with (
        tls_idp(tmp_path) as (idp, pki),
        custom_signin_stack(
            tmp_path, {"GATEWAY_CA_BUNDLE": str(pki.ca_cert)}, idp=idp, browser_ca=pki.ca_cert
        ) as stack,
    ):
        tokens = await stack.sign_in()
        assert claims_of(tokens["access_token"])["email"] == ALICE["email"]
        status, refreshed = await stack.refresh(tokens["refresh_token"])  # the IdP's token endpoint again
        assert status == 200, refreshed
        grants = [event["grant_type"] for event in idp.events() if event["event"] == "token"]
        assert grants == ["authorization_code", "refresh_token"]


async def test_tls_idp_without_the_ca_bundle_fails_cleanly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="switchyard")
    async with (
        tls_idp(tmp_path) as (idp, pki),
        custom_signin_stack(tmp_path, {}, idp=idp, browser_ca=pki.ca_cert) as stack,
    ):
        page = await continue_on_code_page(stack)
        assert page.status == 502, page.text
        assert "does not trust the identity provider's TLS certificate" in page.text
        assert "Sign-in unavailable" in page.text and page.scripts == 0
    log = fleet_log(caplog)
    assert f"TLS verification failed for localhost:{_port(idp)}" in log
    assert "checked against the system trust store" in log
    assert not [event for event in idp.events() if event["event"] == "token"]
    assert_clean(caplog)


@contextlib.asynccontextmanager
async def behind_squid(
    tmp: Path, allow_idp: bool = True
) -> AsyncIterator[tuple[RunningIdp, LocalPKI, Squid]]:
    async with tls_idp(tmp) as (idp, pki):
        allowed = [_port(idp)] if allow_idp else [_port(idp) + 1]
        async with run_squid(allowed_ports=allowed) as squid:
            yield idp, pki, squid


async def test_signin_through_the_corporate_proxy(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="switchyard")
    async with behind_squid(tmp_path) as (idp, pki, squid):
        env = {"HTTPS_PROXY": squid.url(), "GATEWAY_CA_BUNDLE": str(pki.ca_cert)}
        async with custom_signin_stack(tmp_path, env, idp=idp, browser_ca=pki.ca_cert) as stack:
            tokens = await stack.sign_in()
            status, refreshed = await stack.refresh(tokens["refresh_token"])
            assert status == 200, refreshed
        # squid logs a tunnel when it closes: the gateway's IdP session closed with the stack
        lines = await squid.wait_for_log(f"CONNECT localhost:{_port(idp)}")
        tunnels = [line for line in lines if f"CONNECT localhost:{_port(idp)}" in line]
        assert tunnels and all("TCP_TUNNEL/200" in line and "corp-user" in line for line in tunnels), lines
    assert f"proxy 127.0.0.1:{squid.port}" in fleet_log(caplog)  # the start-up line names the proxy
    assert_clean(caplog, squid.password)


async def test_no_proxy_bypasses_the_corporate_proxy(tmp_path: Path) -> None:
    async with behind_squid(tmp_path) as (idp, pki, squid):
        env = {"HTTPS_PROXY": squid.url(), "NO_PROXY": "localhost", "GATEWAY_CA_BUNDLE": str(pki.ca_cert)}
        async with custom_signin_stack(tmp_path, env, idp=idp, browser_ca=pki.ca_cert) as stack:
            await stack.sign_in()
        lines = await squid.wait_for_log("CONNECT", within_s=1.0)
        assert not [line for line in lines if "CONNECT" in line], lines


@pytest.mark.parametrize(
    ("allow_idp", "wrong_password", "in_log"),
    [
        (False, False, "refused the CONNECT to localhost:{port}: 403"),
        (True, True, "proxy authentication failed: the egress proxy 127.0.0.1:{proxy} answered 407"),
    ],
    ids=["acl-deny", "bad-proxy-password"],
)
async def test_a_proxy_refusal_is_a_clear_page_and_a_clean_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, allow_idp: bool, wrong_password: bool, in_log: str
) -> None:
    caplog.set_level(logging.INFO, logger="switchyard")
    async with behind_squid(tmp_path, allow_idp=allow_idp) as (idp, pki, squid):
        proxy_url = squid.url(password="wrong-" + squid.password) if wrong_password else squid.url()
        env = {"HTTPS_PROXY": proxy_url, "GATEWAY_CA_BUNDLE": str(pki.ca_cert)}
        async with custom_signin_stack(tmp_path, env, idp=idp, browser_ca=pki.ca_cert) as stack:
            page = await continue_on_code_page(stack)
            assert page.status == 502, page.text
            assert "outbound proxy did not let it reach the identity provider" in page.text
            assert squid.password not in page.text and "127.0.0.1:" + str(squid.port) not in page.text
            denied = await squid.wait_for_log("TCP_DENIED")
            assert any(f"CONNECT localhost:{_port(idp)}" in line for line in denied), denied
    log = fleet_log(caplog)
    assert in_log.format(port=_port(idp), proxy=squid.port) in log, log
    assert "sign-in: discovery: the identity provider could not be used" in log
    assert not idp.events()
    assert_clean(caplog, squid.password)


async def test_a_refresh_without_the_proxy_keeps_the_sign_in(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The proxy goes away after sign-in: the refresh (which asks the IdP again) answers
    ``503 temporarily_unavailable`` and logs why; once the IdP is reachable again nothing was lost."""
    caplog.set_level(logging.INFO, logger="switchyard")
    async with tls_idp(tmp_path) as (idp, pki), contextlib.AsyncExitStack() as proxy:
        squid = await proxy.enter_async_context(run_squid(allowed_ports=[_port(idp)]))
        env = {"HTTPS_PROXY": squid.url(), "GATEWAY_CA_BUNDLE": str(pki.ca_cert)}
        async with custom_signin_stack(tmp_path, env, idp=idp, browser_ca=pki.ca_cert) as stack:
            tokens = await stack.sign_in()
            await proxy.aclose()  # squid stops: its port refuses connections
            status, body = await stack.refresh(tokens["refresh_token"])
            assert status == 503 and body["error"] == "temporarily_unavailable", body
            bearer_status, _, _ = await stack.message(tokens["access_token"])
            assert bearer_status == 200  # the current access token keeps working
    log = fleet_log(caplog)
    assert "sign-in refresh: the IdP could not be asked:" in log
    assert f"127.0.0.1:{squid.port}" in log
    assert_clean(caplog, squid.password)


async def test_a_plain_http_idp_through_the_proxy_with_bad_credentials(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A loopback http IdP (GATEWAY_ALLOW_INSECURE_LOOPBACK) through HTTP_PROXY: squid's own 407 to
    the forwarded request is a proxy failure, not an IdP answer."""
    caplog.set_level(logging.INFO, logger="switchyard")
    async with running_idp(tmp_path, None, **ALICE) as idp, run_squid(allowed_ports=[_port(idp)]) as squid:
        env = {"HTTP_PROXY": squid.url(password="wrong-" + squid.password)}
        async with custom_signin_stack(tmp_path, env, idp=idp) as stack:
            page = await continue_on_code_page(stack)
            assert page.status == 502, page.text
            assert "outbound proxy did not let it reach the identity provider" in page.text
    log = fleet_log(caplog)
    assert f"proxy authentication failed: the egress proxy 127.0.0.1:{squid.port} answered 407" in log
    assert f"the request to localhost:{_port(idp)}" in log
    assert_clean(caplog, squid.password)
