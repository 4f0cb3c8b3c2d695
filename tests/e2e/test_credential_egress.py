"""Credential calls leave like inference calls: the CA bundle, the proxy and ``NO_PROXY`` (CIDR).

* STS through a TLS-intercepting proxy (the real mitmproxy): it re-signs every tunnel with its own
  CA, and ``GATEWAY_CA_BUNDLE`` (nothing else: no ``AWS_CA_BUNDLE``, no ``REQUESTS_CA_BUNDLE``) is all the
  gateway needs for botocore's web-identity STS call and the Bedrock calls. Without it, or with
  the wrong bundle, the client's error and ``/readyz`` name the TLS failure and the CA checked,
  and mitmproxy logs that its client did not trust it.
* ``NO_PROXY=127.0.0.0/8`` sends STS, container-credential and Google token calls to
  ``127.0.0.1`` direct while the inference calls to ``localhost`` still go through squid (squid's
  access log shows which); without ``NO_PROXY`` they go through squid too.
* azure-identity with the gateway's transport goes through squid, and ``NO_PROXY`` exempts it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import pytest
from azure.identity import ClientSecretCredential

from emulators import EmulatorConfig, run_emulator
from emulators.bedrock_config import DEFAULT_CONTAINER_TOKEN
from gateway.app import create_app
from gateway.metrics import GatewayMetrics
from gateway.process import running
from gateway.providers.foundry import FoundryProvider
from gateway.providers.foundry_auth import credential_token_source
from gateway.providers.requests_egress import azure_transport_options
from tests.providers.foundry_harness import ENTRA_CLIENT_ID, ENTRA_CLIENT_SECRET, ENTRA_TENANT
from tests.support.mitmproxy import run_mitmdump
from tests.support.squid import USER, run_squid
from tests.support.tls import LocalPKI, make_pki
from tests.support.tls_upstreams import GATEWAY_KEY, TlsUpstream, gateway_settings, tls_upstream

MODEL = "claude-sonnet-4-6"
USER_TURN: Any = [{"role": "user", "content": "hi"}]


def _pki(directory: Path) -> LocalPKI:
    directory.mkdir()
    return make_pki(directory)


async def _ask(url: str) -> anthropic.APIStatusError | None:
    async with anthropic.AsyncAnthropic(api_key=GATEWAY_KEY, base_url=url, max_retries=0) as client:
        try:
            message = await client.messages.create(model=MODEL, max_tokens=8, messages=USER_TURN)
        except anthropic.APIStatusError as exc:
            return exc
    assert message.stop_reason == "end_turn"
    return None


async def _readyz(url: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/readyz") as response:
        return response.status, await response.json()


def _sts_calls(upstream: TlsUpstream) -> int:
    return sum(1 for r in upstream.emulator.requests if r.path_only == "/")


async def test_sts_through_an_intercepting_proxy_with_only_the_ca_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream_pki = _pki(tmp_path / "upstream-pki")
    async with (
        tls_upstream("bedrock", tmp_path, upstream_pki) as upstream,
        run_mitmdump(tmp_path / "mitm", upstream_pki.ca_cert) as mitm,
    ):
        upstream.apply_process_env(monkeypatch)
        for name in ("AWS_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE"):
            monkeypatch.delenv(name, raising=False)
        settings = gateway_settings(upstream.env, HTTPS_PROXY=mitm.url, GATEWAY_CA_BUNDLE=str(mitm.ca_cert))
        async with running(create_app(settings, metrics=GatewayMetrics()), "127.0.0.1", 0) as server:
            assert await _ask(server.base_url) is None
            assert await _ask(server.base_url) is None
        flows = await mitm.wait_for_flows(3)
    origin = f"https://127.0.0.1:{upstream.emulator.port}"
    # mitmproxy decrypted the STS call (AssumeRoleWithWebIdentity is a POST to "/") and both
    # Bedrock calls: each was re-signed with its CA, the only one the gateway was given.
    assert flows.count(f"POST {origin}/ << 200") == 1, flows
    invokes = [f for f in flows if f.startswith(f"POST {origin}/model/") and f.endswith("<< 200")]
    assert len(invokes) == 2, flows
    assert _sts_calls(upstream) == 1


@pytest.mark.parametrize("bundle", ["none", "upstream-ca"])
async def test_sts_tls_failure_names_the_ca_and_turns_readiness(
    bundle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream_pki = _pki(tmp_path / "upstream-pki")
    extra = {"GATEWAY_CA_BUNDLE": str(upstream_pki.ca_cert)} if bundle == "upstream-ca" else {}
    named = str(upstream_pki.ca_cert) if bundle == "upstream-ca" else "the system trust store"
    async with (
        tls_upstream("bedrock", tmp_path, upstream_pki) as upstream,
        run_mitmdump(tmp_path / "mitm", upstream_pki.ca_cert) as mitm,
    ):
        upstream.apply_process_env(monkeypatch)
        settings = gateway_settings(upstream.env, HTTPS_PROXY=mitm.url, **extra)
        async with running(create_app(settings, metrics=GatewayMetrics()), "127.0.0.1", 0) as server:
            for _ in range(3):
                assert (await _readyz(server.base_url))[0] == 200
                failed = await _ask(server.base_url)
                assert failed is not None and failed.status_code == 502
                message = failed.message
                assert "AWS STS (AssumeRoleWithWebIdentity)" in message
                assert "TLS verification failed" in message and named in message
                assert "expired" not in message
                assert failed.response.headers["x-should-retry"] == "false"
            status, body = await _readyz(server.base_url)
        assert status == 503
        assert "3 consecutive failures" in body["reason"] and named in body["reason"]
        assert mitm.flows() == [] and _sts_calls(upstream) == 0
        assert "does not trust the proxy's certificate" in mitm.output()
        assert not [r for r in upstream.emulator.requests if r.path_only.startswith("/model/")]


def _tunnels(lines: list[str], host: str, port: int) -> int:
    return sum(f"CONNECT {host}:{port} {USER}" in line and "TCP_TUNNEL/200" in line for line in lines)


@pytest.mark.parametrize("provider", ["bedrock", "vertex"])
async def test_no_proxy_cidr_for_credential_calls(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inference goes to ``localhost`` (a name: never matched by a CIDR), the credential call to
    ``127.0.0.1``: with ``NO_PROXY=127.0.0.0/8`` squid sees only the inference tunnel."""
    pki = _pki(tmp_path / "pki")
    async with tls_upstream(provider, tmp_path, pki) as upstream:
        upstream.apply_process_env(monkeypatch)
        port = upstream.emulator.port
        env = {**upstream.env, upstream.base_url_var: f"https://localhost:{port}{upstream.suffix}"}
        async with run_squid(allowed_ports=[port]) as squid:
            for no_proxy in ("127.0.0.0/8", ""):
                before = len(squid.log_lines())
                settings = gateway_settings(
                    env, HTTPS_PROXY=squid.url(), NO_PROXY=no_proxy, GATEWAY_CA_BUNDLE=str(pki.ca_cert)
                )
                app = create_app(settings, metrics=GatewayMetrics())
                async with running(app, "127.0.0.1", 0) as server:
                    assert await _ask(server.base_url) is None
                expected = 1 if no_proxy else 2
                lines = await squid.wait_for_log("TCP_TUNNEL/200", expected, since=before)
                assert _tunnels(lines, "localhost", port) == 1, lines
                assert _tunnels(lines, "127.0.0.1", port) == (0 if no_proxy else 1), lines
        credential_path = "/" if provider == "bedrock" else "/token"
        assert sum(r.path_only == credential_path for r in upstream.emulator.requests) == 2


async def test_container_credentials_follow_the_proxy_and_no_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pki = _pki(tmp_path / "pki")
    async with tls_upstream("bedrock", tmp_path, pki) as upstream:
        port = upstream.emulator.port
        process_env = {
            name: value for name, value in upstream.process_env.items() if not name.startswith("AWS_ROLE")
        }
        process_env.pop("AWS_WEB_IDENTITY_TOKEN_FILE")
        process_env["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = f"https://127.0.0.1:{port}/container-credentials"
        process_env["AWS_CONTAINER_AUTHORIZATION_TOKEN"] = DEFAULT_CONTAINER_TOKEN
        for name, value in process_env.items():
            monkeypatch.setenv(name, value)
        env = {**upstream.env, upstream.base_url_var: f"https://localhost:{port}"}
        async with run_squid(allowed_ports=[port]) as squid:
            for no_proxy in ("127.0.0.0/8", ""):
                before = len(squid.log_lines())
                settings = gateway_settings(
                    env, HTTPS_PROXY=squid.url(), NO_PROXY=no_proxy, GATEWAY_CA_BUNDLE=str(pki.ca_cert)
                )
                async with running(create_app(settings, metrics=GatewayMetrics()), "127.0.0.1", 0) as server:
                    assert await _ask(server.base_url) is None
                expected = 1 if no_proxy else 2
                lines = await squid.wait_for_log("TCP_TUNNEL/200", expected, since=before)
                assert _tunnels(lines, "127.0.0.1", port) == (0 if no_proxy else 1), lines
        paths = [r.path_only for r in upstream.emulator.requests]
        assert paths.count("/container-credentials") == 2


async def test_azure_identity_through_squid_and_no_proxy(tmp_path: Path) -> None:
    pki = _pki(tmp_path / "pki")
    config = EmulatorConfig(foundry_entra_clients={ENTRA_CLIENT_ID: ENTRA_CLIENT_SECRET})
    context = pki.server_context(require_client_cert=False)
    async with run_emulator(config, provider="foundry", ssl_context=context) as emu:
        env = {
            "GATEWAY_PROVIDER": "foundry",
            "ANTHROPIC_FOUNDRY_BASE_URL": f"https://localhost:{emu.port}/anthropic",
        }
        async with run_squid(allowed_ports=[emu.port]) as squid:
            for no_proxy in ("127.0.0.0/8", ""):
                before = len(squid.log_lines())
                settings = gateway_settings(
                    env, HTTPS_PROXY=squid.url(), NO_PROXY=no_proxy, GATEWAY_CA_BUNDLE=str(pki.ca_cert)
                )
                options = azure_transport_options(settings.egress)  # what DefaultAzureCredential gets too
                credential = ClientSecretCredential(
                    ENTRA_TENANT,
                    ENTRA_CLIENT_ID,
                    ENTRA_CLIENT_SECRET,
                    authority=emu.base_url,
                    disable_instance_discovery=True,
                    **options,
                )
                source = credential_token_source(credential, settings.foundry.entra_scope)
                app = create_app(
                    settings, FoundryProvider(settings, token_source=source), metrics=GatewayMetrics()
                )
                async with running(app, "127.0.0.1", 0) as server:
                    assert await _ask(server.base_url) is None
                credential.close()
                options["transport"].session.close()  # the squid tunnel is logged when it closes
                lines = await squid.wait_for_log("TCP_TUNNEL/200", 1 if no_proxy else 2, since=before)
                assert _tunnels(lines, "localhost", emu.port) == 1, lines
                assert _tunnels(lines, "127.0.0.1", emu.port) == (0 if no_proxy else 1), lines
    assert sum(r.path.endswith("/oauth2/v2.0/token") for r in emu.requests) == 2


async def test_google_token_call_tls_failure_names_the_trust_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pki = _pki(tmp_path / "pki")
    async with tls_upstream("vertex", tmp_path, pki) as upstream:
        settings = gateway_settings(upstream.env)  # no GATEWAY_CA_BUNDLE: the test CA is not trusted
        async with running(create_app(settings, metrics=GatewayMetrics()), "127.0.0.1", 0) as server:
            failed = await _ask(server.base_url)
    assert failed is not None and failed.status_code == 502
    assert f"Google's token endpoint at 127.0.0.1:{upstream.emulator.port}" in failed.message
    assert "TLS verification failed" in failed.message and "the system trust store" in failed.message
    assert failed.response.headers["x-should-retry"] == "false"
    assert not upstream.emulator.requests
