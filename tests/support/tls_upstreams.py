"""Each provider's emulator served over HTTPS (a test CA), with the environment a gateway needs.

    async with tls_upstream("bedrock", tmp_path, pki) as upstream:
        upstream.apply_process_env(monkeypatch)   # botocore / google-auth read these themselves
        settings = gateway_settings(upstream.env, HTTPS_PROXY=..., GATEWAY_CA_BUNDLE=str(pki.ca_cert))

* ``anthropic``: the first-party emulator and an upstream API key;
* ``bedrock``: SigV4 with credentials from web identity, STS on the same emulator
  (``AWS_ENDPOINT_URL_STS``), so the credential call goes where the inference calls go;
* ``vertex``: a service account whose ``token_uri`` is the emulator's ``/token`` (google-auth
  signs a JWT and exchanges it there);
* ``foundry``: the ``/anthropic`` root and an API key.

Everything uses ``https`` so a proxy sees a CONNECT for every call.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from emulators import EmulatorConfig, RunningEmulator, run_emulator
from emulators.bedrock_config import DEFAULT_WEB_IDENTITY_TOKEN
from gateway.config import Settings
from tests.providers.bedrock_harness import isolated_aws_files
from tests.providers.foundry_harness import FOUNDRY_KEY
from tests.providers.vertex_harness import PROJECT, REGION, SERVICE_ACCOUNT, public_pem, service_account_key
from tests.providers.vertex_harness import write_service_account as write_vertex_account
from tests.support.tls import LocalPKI

GATEWAY_KEY = "sk-gw-egress-tests"
METRICS_KEY = "sk-gw-egress-scraper"  # reads /metrics (client keys do not)
UPSTREAM_KEY = "sk-upstream-egress"
PROVIDERS = ("anthropic", "bedrock", "vertex", "foundry")


@dataclass
class TlsUpstream:
    provider: str
    emulator: RunningEmulator
    env: dict[str, str]
    base_url_var: str
    suffix: str = ""
    process_env: dict[str, str] = field(default_factory=dict)

    def apply_process_env(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """What the SDKs' own credential chains read from ``os.environ``."""
        for name, value in self.process_env.items():
            monkeypatch.setenv(name, value)

    def pointed_at(self, port: int) -> dict[str, str]:
        """``env`` with the inference base URL moved to another port (credential calls stay)."""
        return {**self.env, self.base_url_var: f"https://127.0.0.1:{port}{self.suffix}"}


def gateway_settings(env: Mapping[str, str], **extra: str) -> Settings:
    return Settings.from_environ(
        {
            "GATEWAY_API_KEYS": GATEWAY_KEY,
            "GATEWAY_METRICS_API_KEYS": METRICS_KEY,
            "GATEWAY_MAX_RETRIES": "0",
            **env,
            **extra,
        }
    )


def web_identity(tmp_path: Path, sts_url: str) -> dict[str, str]:
    token_file = tmp_path / "web-identity-token"
    token_file.write_text(DEFAULT_WEB_IDENTITY_TOKEN)
    return {
        "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/switchyard",
        "AWS_ROLE_SESSION_NAME": "gateway",
        "AWS_WEB_IDENTITY_TOKEN_FILE": str(token_file),
        "AWS_ENDPOINT_URL_STS": sts_url,
    }


@contextlib.asynccontextmanager
async def tls_upstream(provider: str, tmp_path: Path, pki: LocalPKI) -> AsyncIterator[TlsUpstream]:
    context = pki.server_context(require_client_cert=False)
    if provider == "anthropic":
        config = EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY}))
        async with run_emulator(config, ssl_context=context) as emu:
            env = {"ANTHROPIC_BASE_URL": emu.base_url, "ANTHROPIC_API_KEY": UPSTREAM_KEY}
            yield TlsUpstream(provider, emu, env, "ANTHROPIC_BASE_URL")
    elif provider == "bedrock":
        async with run_emulator(None, provider="bedrock", ssl_context=context) as emu:
            aws = {
                **isolated_aws_files(tmp_path),
                **web_identity(tmp_path, emu.base_url),
                "AWS_REGION": "us-east-1",
            }
            env = {"GATEWAY_PROVIDER": "bedrock", "ANTHROPIC_BEDROCK_BASE_URL": emu.base_url, **aws}
            yield TlsUpstream(provider, emu, env, "ANTHROPIC_BEDROCK_BASE_URL", process_env=aws)
    elif provider == "vertex":
        config = EmulatorConfig(
            vertex_projects=frozenset({PROJECT}),
            vertex_locations=frozenset({REGION}),
            vertex_tokens=frozenset(),
            vertex_service_accounts={SERVICE_ACCOUNT: public_pem(service_account_key())},
        )
        async with run_emulator(config, provider="vertex", ssl_context=context) as emu:
            account = write_vertex_account(tmp_path, emu.base_url + "/token")
            env = {
                "GATEWAY_PROVIDER": "vertex",
                "CLOUD_ML_REGION": REGION,
                "ANTHROPIC_VERTEX_PROJECT_ID": PROJECT,
                "ANTHROPIC_VERTEX_BASE_URL": emu.base_url + "/v1",
                "GOOGLE_APPLICATION_CREDENTIALS": str(account),
            }
            yield TlsUpstream(provider, emu, env, "ANTHROPIC_VERTEX_BASE_URL", "/v1")
    elif provider == "foundry":
        config = EmulatorConfig(foundry_api_keys=frozenset({FOUNDRY_KEY}))
        async with run_emulator(config, provider="foundry", ssl_context=context) as emu:
            env = {
                "GATEWAY_PROVIDER": "foundry",
                "ANTHROPIC_FOUNDRY_BASE_URL": emu.base_url + "/anthropic",
                "ANTHROPIC_FOUNDRY_API_KEY": FOUNDRY_KEY,
            }
            yield TlsUpstream(provider, emu, env, "ANTHROPIC_FOUNDRY_BASE_URL", "/anthropic")
    else:
        raise ValueError(provider)
