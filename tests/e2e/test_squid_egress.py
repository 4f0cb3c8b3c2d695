"""All four providers through the Debian squid with proxy authentication, started by the tests.

Every upstream is an emulator served over HTTPS (a test CA), so each call is a CONNECT through
squid; the credential calls go through it too (STS for Bedrock's web identity, the OAuth token
endpoint for Vertex). For each provider: a request succeeds through squid with the right
password; a wrong password is a 502 naming proxy authentication (407); a CONNECT to a port squid
refuses is a 502 naming the 403; a proxy that is not there (connection refused, name not
resolved) is a 502 "proxy unreachable", retried by the gateway. Finally every captured log line
(the access log included), every response and the metrics are searched for the proxy password.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import orjson
import pytest

from emulators import EmulatorConfig, run_emulator
from gateway.app import create_app
from gateway.metrics import GatewayMetrics
from gateway.process import running
from tests.support.log_lines import LogLines
from tests.support.squid import USER, Squid, free_port, run_squid
from tests.support.tls import LocalPKI, make_pki
from tests.support.tls_upstreams import (
    GATEWAY_KEY,
    METRICS_KEY,
    PROVIDERS,
    UPSTREAM_KEY,
    TlsUpstream,
    gateway_settings,
    tls_upstream,
)

MODEL = "claude-sonnet-4-6"
USER_TURN: Any = [{"role": "user", "content": "hi"}]


@pytest.fixture
def pki(tmp_path: Path) -> LocalPKI:
    directory = tmp_path / "pki"
    directory.mkdir()
    return make_pki(directory)


class Seen:
    """Everything the gateway said to clients: bodies and headers, to search for secrets."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def add(self, *texts: str) -> None:
        self.texts.extend(texts)


async def _metrics(url: str) -> str:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{url}/metrics", headers={"x-api-key": METRICS_KEY}) as response,
    ):
        assert response.status == 200
        return await response.text()


async def _ask(url: str, seen: Seen) -> anthropic.APIStatusError | None:
    """One request; the error it ended with (``None`` on success)."""
    async with anthropic.AsyncAnthropic(api_key=GATEWAY_KEY, base_url=url, max_retries=0) as client:
        try:
            raw = await client.messages.with_raw_response.create(
                model=MODEL, max_tokens=8, messages=USER_TURN
            )
        except anthropic.APIStatusError as exc:
            seen.add(exc.response.text, str(dict(exc.response.headers)))
            return exc
        seen.add(raw.http_response.text, str(dict(raw.headers)))
        assert (await raw.parse()).stop_reason == "end_turn"
        return None


async def _one(env: dict[str, str], seen: Seen, **extra: str) -> anthropic.APIStatusError | None:
    """A gateway for ``env`` (plus ``extra``), one request through it, its metrics; the error."""
    settings = gateway_settings(env, **extra)
    async with running(create_app(settings, metrics=GatewayMetrics()), "127.0.0.1", 0) as server:
        result = await _ask(server.base_url, seen)
        seen.add(await _metrics(server.base_url))
    return result


def _error(exc: anthropic.APIStatusError | None) -> tuple[int, str, str, dict[str, str]]:
    assert exc is not None, "expected the request to fail"
    body = orjson.loads(exc.response.content)
    return exc.status_code, body["error"]["type"], body["error"]["message"], dict(exc.response.headers)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_provider_through_squid_with_proxy_auth(
    provider: str,
    tmp_path: Path,
    pki: LocalPKI,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    log_lines: LogLines,
) -> None:
    caplog.set_level(logging.DEBUG)
    seen = Seen()
    ca = str(pki.ca_cert)
    async with tls_upstream(provider, tmp_path, pki) as upstream:
        upstream.apply_process_env(monkeypatch)
        async with run_squid(allowed_ports=[upstream.emulator.port]) as squid:
            # 1. the right password: the request (and its credential call) goes through squid
            assert await _one(upstream.env, seen, HTTPS_PROXY=squid.url(), GATEWAY_CA_BUNDLE=ca) is None
            tunnel = f"TCP_TUNNEL/200 CONNECT 127.0.0.1:{upstream.emulator.port} {USER}"
            expected_tunnels = 2 if provider in ("bedrock", "vertex") else 1  # + STS / token endpoint
            await squid.wait_for_log(f"CONNECT 127.0.0.1:{upstream.emulator.port}", expected_tunnels)
            assert squid.connects().count(tunnel) >= expected_tunnels, squid.connects()
            _check_credential_calls(upstream)

            # 2. a wrong password: 407, named, not retried even with retries allowed
            failed = await _one(
                upstream.env,
                seen,
                HTTPS_PROXY=squid.url("wrong-password"),
                GATEWAY_CA_BUNDLE=ca,
                GATEWAY_MAX_RETRIES="2",
            )
            status, error_type, message, headers = _error(failed)
            assert (status, error_type) == (502, "api_error"), message
            assert "proxy authentication failed" in message and "407" in message
            assert f"127.0.0.1:{squid.port}" in message
            assert headers["x-should-retry"] == "false" and headers["x-gateway-retries"] == "0"
            await squid.wait_for_log("TCP_DENIED/407")

            # 3. a CONNECT to a port squid's rules refuse: 403, named
            refused_port = free_port()
            failed = await _one(
                upstream.pointed_at(refused_port), seen, HTTPS_PROXY=squid.url(), GATEWAY_CA_BUNDLE=ca
            )
            status, error_type, message, headers = _error(failed)
            assert (status, error_type) == (502, "api_error"), message
            assert "refused the CONNECT" in message and "403" in message
            assert f"127.0.0.1:{refused_port}" in message
            await squid.wait_for_log("TCP_DENIED/403 ")

        # 4. no proxy there: refused connection, then an unresolvable name; retried by the gateway
        for proxy, detail in (
            (f"http://{USER}:{squid.password}@127.0.0.1:{free_port()}", "connection refused"),
            (f"http://{USER}:{squid.password}@proxy.invalid:3128", "name not resolved"),
        ):
            failed = await _one(
                upstream.env,
                seen,
                HTTPS_PROXY=proxy,
                GATEWAY_CA_BUNDLE=ca,
                GATEWAY_MAX_RETRIES="1",
                GATEWAY_MAX_RETRY_DELAY_S="0.01",
            )
            status, error_type, message, headers = _error(failed)
            assert (status, error_type) == (502, "api_error"), message
            assert "proxy unreachable" in message and detail in message
            assert "upstream unreachable" not in message
            assert headers.get("x-should-retry") != "false"
            assert headers["x-gateway-retries"] == "1"

    _no_password_anywhere(squid, seen, caplog, log_lines)
    statuses = [record["status"] for record in log_lines.access()]
    assert statuses == [200, 502, 502, 502, 502], statuses


def _check_credential_calls(upstream: TlsUpstream) -> None:
    paths = [r.path_only for r in upstream.emulator.requests]
    if upstream.provider == "bedrock":
        assert "/" in paths  # STS AssumeRoleWithWebIdentity, through squid
    if upstream.provider == "vertex":
        assert "/token" in paths


def _no_password_anywhere(
    squid: Squid, seen: Seen, caplog: pytest.LogCaptureFixture, log_lines: LogLines
) -> None:
    assert caplog.records, "nothing was logged"
    access = log_lines.text()  # the access lines, as the log writer wrote them
    assert '"event":"request"' in access, "no access line was written"
    assert squid.password not in access and "wrong-password" not in access
    for record in caplog.records:
        text = record.getMessage() + (
            logging.Formatter().formatException(record.exc_info) if record.exc_info else ""
        )
        assert squid.password not in text, f"proxy password in a log line: {record.name}: {text[:300]}"
        assert "wrong-password" not in text, f"proxy password in a log line: {record.name}: {text[:300]}"
    assert squid.password not in caplog.text and "wrong-password" not in caplog.text
    assert seen.texts
    for text in seen.texts:
        assert squid.password not in text and "wrong-password" not in text
        assert f"{USER}:" not in text


async def test_plain_http_upstream_407_from_squid_is_named(
    caplog: pytest.LogCaptureFixture, log_lines: LogLines
) -> None:
    """Without TLS the proxy answers the request itself: its 407 is a response, not a failed
    CONNECT, and still becomes the named 502 (only a proxy sends 407)."""
    caplog.set_level(logging.DEBUG)
    seen = Seen()
    config = EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY}))
    async with run_emulator(config) as emu, run_squid(allowed_ports=[emu.port]) as squid:
        env = {"ANTHROPIC_BASE_URL": emu.base_url, "ANTHROPIC_API_KEY": UPSTREAM_KEY}
        assert await _one(env, seen, HTTP_PROXY=squid.url()) is None
        status, error_type, message, headers = _error(
            await _one(env, seen, HTTP_PROXY=squid.url("wrong-password"))
        )
        lines = await squid.wait_for_log(f"POST {emu.base_url}/v1/messages", 2)
        assert [line.split()[3] for line in lines if "POST" in line] == ["TCP_MISS/200", "TCP_DENIED/407"]
    assert (status, error_type) == (502, "api_error")
    assert "proxy authentication failed" in message and "407" in message
    assert "the request to 127.0.0.1" in message
    assert headers["x-should-retry"] == "false"
    assert len(emu.requests) == 1
    _no_password_anywhere(squid, seen, caplog, log_lines)
