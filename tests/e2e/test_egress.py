"""Corporate egress: custom CA bundles, client mTLS and forward proxies, with real TLS and sockets."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import anthropic
import pytest

from emulators import EmulatorConfig, run_emulator
from gateway.app import create_app
from gateway.config import Settings
from gateway.process import running
from gateway.providers.anthropic import AnthropicProvider
from gateway.providers.base import PreparedRequest, UpstreamResponse
from gateway.startup_summary import public_summary
from tests.support.log_lines import LogLines
from tests.support.proxy import forward_proxy
from tests.support.tls import LocalPKI, make_pki

KEY = "sk-gw"
UPSTREAM_KEY = "sk-up"
MODEL = "claude-sonnet-4-6"
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> LocalPKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


async def _ask(gateway_url: str) -> anthropic.types.Message:
    client = anthropic.AsyncAnthropic(api_key=KEY, base_url=gateway_url, max_retries=0)
    try:
        return await client.messages.create(model=MODEL, max_tokens=16, messages=USER)  # type: ignore[arg-type]
    finally:
        await client.close()


async def _gateway(**env: str) -> AsyncIterator[str]:
    settings = Settings.from_environ(
        {"GATEWAY_API_KEYS": KEY, "ANTHROPIC_API_KEY": UPSTREAM_KEY, "GATEWAY_MAX_RETRIES": "0", **env}
    )
    async with running(create_app(settings), "127.0.0.1", 0) as server:
        yield server.base_url


EMULATOR = EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY}))


async def test_custom_ca_bundle(pki: LocalPKI) -> None:
    async with run_emulator(EMULATOR, ssl_context=pki.server_context(require_client_cert=False)) as emu:
        assert emu.base_url.startswith("https://")
        async for url in _gateway(ANTHROPIC_BASE_URL=emu.base_url, GATEWAY_CA_BUNDLE=str(pki.ca_cert)):
            message = await _ask(url)
            assert message.stop_reason == "end_turn"
        # SSL_CERT_FILE is honoured the same way
        async for url in _gateway(ANTHROPIC_BASE_URL=emu.base_url, SSL_CERT_FILE=str(pki.ca_cert)):
            assert (await _ask(url)).stop_reason == "end_turn"


async def test_untrusted_upstream_certificate_is_502(pki: LocalPKI) -> None:
    async with run_emulator(EMULATOR, ssl_context=pki.server_context(require_client_cert=False)) as emu:
        async for url in _gateway(ANTHROPIC_BASE_URL=emu.base_url):  # system CAs only
            with pytest.raises(anthropic.APIStatusError) as info:
                await _ask(url)
            assert info.value.status_code == 502
            assert "TLS" in info.value.body["error"]["message"]  # type: ignore[index]
        assert emu.requests == []


async def test_client_mtls(pki: LocalPKI) -> None:
    context = pki.server_context(require_client_cert=True)
    async with run_emulator(EMULATOR, ssl_context=context) as emu:
        async for url in _gateway(
            ANTHROPIC_BASE_URL=emu.base_url,
            GATEWAY_CA_BUNDLE=str(pki.ca_cert),
            GATEWAY_CLIENT_CERT=str(pki.client_cert),
            GATEWAY_CLIENT_KEY=str(pki.client_key),
        ):
            assert (await _ask(url)).stop_reason == "end_turn"
        async for url in _gateway(ANTHROPIC_BASE_URL=emu.base_url, GATEWAY_CA_BUNDLE=str(pki.ca_cert)):
            with pytest.raises(anthropic.APIStatusError) as info:
                await _ask(url)
            assert info.value.status_code == 502
        assert len(emu.requests) == 1


async def test_https_upstream_through_connect_proxy(pki: LocalPKI) -> None:
    async with (
        run_emulator(EMULATOR, ssl_context=pki.server_context(require_client_cert=False)) as emu,
        forward_proxy() as proxy,
    ):
        proxy_url = proxy.url.replace("http://", "http://corp-user:proxy-pass@")
        async for url in _gateway(
            ANTHROPIC_BASE_URL=emu.base_url, GATEWAY_CA_BUNDLE=str(pki.ca_cert), HTTPS_PROXY=proxy_url
        ):
            assert (await _ask(url)).stop_reason == "end_turn"
        assert proxy.seen == [f"CONNECT 127.0.0.1:{emu.port}"]
        assert proxy.proxy_authorization  # proxy credentials from the URL were used
        assert len(emu.requests) == 1


async def test_plain_http_upstream_through_proxy_and_no_proxy() -> None:
    async with run_emulator(EMULATOR) as emu, forward_proxy() as proxy:
        async for url in _gateway(ANTHROPIC_BASE_URL=emu.base_url, HTTP_PROXY=proxy.url):
            assert (await _ask(url)).stop_reason == "end_turn"
        assert proxy.seen == [f"POST {emu.base_url}/v1/messages"]
        async for url in _gateway(
            ANTHROPIC_BASE_URL=emu.base_url, HTTP_PROXY=proxy.url, NO_PROXY="localhost,127.0.0.0/8"
        ):
            assert (await _ask(url)).stop_reason == "end_turn"
        assert len(proxy.seen) == 1  # the second gateway went direct
        assert len(emu.requests) == 2


async def test_stream_fallback_reports_the_proxy_refusal(pki: LocalPKI) -> None:
    """A stream stalls before content; its non-streaming fallback needs a new tunnel, which the
    proxy refuses with 407: the client gets the named 502, not a bare 500."""
    async with (
        run_emulator(EMULATOR, ssl_context=pki.server_context(require_client_cert=False)) as emu,
        forward_proxy() as proxy,
    ):
        proxy.refuse_connects_after = 1
        async for url in _gateway(
            ANTHROPIC_BASE_URL=emu.base_url,
            GATEWAY_CA_BUNDLE=str(pki.ca_cert),
            HTTPS_PROXY=proxy.url.replace("http://", "http://corp-user:proxy-pass@"),
            GATEWAY_STREAM_IDLE_WARNING_S="0.1",
            GATEWAY_STREAM_IDLE_TIMEOUT_S="0.2",
        ):
            client = anthropic.AsyncAnthropic(
                api_key=KEY,
                base_url=url,
                max_retries=0,
                default_headers={"x-emulator-fault": "stall_after=2:1"},
            )
            async with client:
                with pytest.raises(anthropic.APIStatusError) as info:
                    async with client.messages.stream(model=MODEL, max_tokens=16, messages=USER) as stream:  # type: ignore[arg-type]
                        await stream.get_final_message()
        assert proxy.seen == [f"CONNECT 127.0.0.1:{emu.port}"] * 2
    assert info.value.status_code == 502
    message = info.value.body["error"]["message"]  # type: ignore[index]
    assert "non-streaming fallback failed: proxy authentication failed" in message
    assert "proxy-pass" not in message and len(emu.requests) == 1


def test_proxy_credentials_never_logged() -> None:
    settings = Settings.from_environ({"HTTPS_PROXY": "http://u:proxy-pass@proxy:3128"})
    assert "proxy-pass" not in repr(settings) and "proxy-pass" not in str(public_summary(settings))


class _BrokenProvider(AnthropicProvider):
    """A provider with a bug: its error's text carries a proxy URL with credentials."""

    async def messages(self, request: PreparedRequest) -> UpstreamResponse:
        raise RuntimeError("cannot use proxy URL('http://corp-user:proxy-pass@10.0.0.1:3128')")


async def test_unexpected_error_is_a_json_500_logged_without_credentials(
    caplog: pytest.LogCaptureFixture, log_lines: LogLines
) -> None:
    caplog.set_level(logging.INFO)
    settings = Settings.from_environ({"GATEWAY_API_KEYS": KEY, "ANTHROPIC_API_KEY": UPSTREAM_KEY})
    async with running(create_app(settings, _BrokenProvider(settings)), "127.0.0.1", 0) as server:
        with pytest.raises(anthropic.InternalServerError) as info:
            await _ask(server.base_url)
    assert info.value.response.headers["content-type"] == "application/json"
    assert info.value.body["error"] == {"type": "api_error", "message": "internal gateway error"}  # type: ignore[index]
    access = log_lines.access()
    assert [(a["status"], a["failure"]) for a in access] == [(500, "internal error: RuntimeError")]
    assert "RuntimeError" in caplog.text and "10.0.0.1:3128" in caplog.text
    assert "proxy-pass" not in caplog.text and "proxy-pass" not in log_lines.text()
