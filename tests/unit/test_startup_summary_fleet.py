"""The start-up configuration line names the fleet front door (sign-in, policy, several upstreams,
telemetry collectors) and none of its secrets: the IdP client secret (inline or in its file), the
token signing keys, the collectors' headers, userinfo in any URL."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.config import Settings
from gateway.startup_summary import public_summary

CLIENT_SECRET = "idp-client-secret-5f0c"
SIGNING_SECRET = "signing-secret-0123456789abcdef-6d1e"
COLLECTOR_TOKEN = "collector-token-77ab"
REDIS_PASSWORD = "redispass8e2f"
ISSUER_PASSWORD = "issuerpass41c9"
SECRETS = (CLIENT_SECRET, SIGNING_SECRET, COLLECTOR_TOKEN, REDIS_PASSWORD, ISSUER_PASSWORD)

POLICY = """
mode: first_match
base: {models: {deny: [opus]}}
groups:
  - {group: eng, spend_caps: {daily_usd: 10}}
  - {group: contractors, models: {deny: [opus]}}
users:
  - {user: alice@example.com, spend_caps: {monthly_usd: 100}}
"""
UPSTREAMS = """
upstreams:
  - {name: bedrock-us, provider: bedrock, region: us-west-2}
  - {name: first, provider: anthropic, credentials: {ANTHROPIC_API_KEY: "${FIRST_KEY}"}}
routes:
  - {models: ["claude-*"], upstreams: [first, bedrock-us]}
"""


def _fleet_environ(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "client-secret").write_text(CLIENT_SECRET + "\n")
    (tmp_path / "signing-keys").write_text(f"k2026 {SIGNING_SECRET}\n")
    (tmp_path / "policy.yaml").write_text(POLICY)
    return {
        "GATEWAY_API_KEYS": "sk-gw-inbound",
        "ANTHROPIC_API_KEY": "sk-ant-upstream",
        "GATEWAY_PUBLIC_URL": "https://claude-gw.corp.example",
        "GATEWAY_OIDC_ISSUER": f"https://gw:{ISSUER_PASSWORD}@login.corp.example/realms/eng",
        "GATEWAY_OIDC_CLIENT_ID": "switchyard",
        "GATEWAY_OIDC_CLIENT_SECRET_FILE": str(tmp_path / "client-secret"),
        "GATEWAY_OIDC_GROUPS_CLAIM": "realm_access.roles",
        "GATEWAY_TOKEN_SIGNING_KEYS_FILE": str(tmp_path / "signing-keys"),
        "GATEWAY_POLICY_FILE": str(tmp_path / "policy.yaml"),
        "GATEWAY_SESSION_STORE": f"redis://:{REDIS_PASSWORD}@switchyard-redis:6379/0",
        "GATEWAY_OTLP_FORWARD_URLS": "https://otel.corp.example:4318/otlp?tenant=eng,http://10.1.2.3:4318",
        "GATEWAY_OTLP_FORWARD_HEADERS": f"Authorization=Bearer%20{COLLECTOR_TOKEN}",
    }


def _line(settings: Settings) -> str:
    """The summary as ``switchyard serve`` logs it (``gateway.cli``: one JSON object)."""
    return json.dumps(public_summary(settings))


def test_summary_names_signin_policy_and_collectors_without_secrets(tmp_path: Path) -> None:
    settings = Settings.from_environ(_fleet_environ(tmp_path))
    settings.require_startable()
    summary = public_summary(settings)
    assert summary["signin"] == {
        "issuer": "https://login.corp.example/realms/eng",
        "public_url": "https://claude-gw.corp.example",
        "client_id": "switchyard",
        "client_secret": f"GATEWAY_OIDC_CLIENT_SECRET_FILE ({tmp_path / 'client-secret'})",
        "groups_claim": "realm_access.roles",
        "signing_keys": f"GATEWAY_TOKEN_SIGNING_KEYS_FILE ({tmp_path / 'signing-keys'})",
        "store": "redis",
    }
    assert summary["policy"] == {
        "file": str(tmp_path / "policy.yaml"),
        "rules": {"mode": "first_match", "groups": 2, "users": 1},
        "counters": "redis",
    }
    assert summary["otlp_forward"] == ["otel.corp.example:4318", "10.1.2.3:4318"]
    assert "upstreams" not in summary
    line = _line(settings)
    assert "\n" not in line
    for secret in SECRETS:
        assert secret not in line, secret
    assert "tenant=eng" not in line  # a collector is named by host:port only


def test_inline_client_secret_generated_keys_and_embedded_store(tmp_path: Path) -> None:
    environ = _fleet_environ(tmp_path)
    for name in (
        "GATEWAY_OIDC_CLIENT_SECRET_FILE",
        "GATEWAY_TOKEN_SIGNING_KEYS_FILE",
        "GATEWAY_SESSION_STORE",
    ):
        del environ[name]
    environ["GATEWAY_OIDC_CLIENT_SECRET"] = CLIENT_SECRET
    settings = Settings.from_environ(environ)
    summary = public_summary(settings)
    assert summary["signin"]["client_secret"] == "GATEWAY_OIDC_CLIENT_SECRET"
    assert summary["signin"]["signing_keys"] == "generated, in the store"
    assert summary["signin"]["store"] == "memory"
    assert summary["policy"]["counters"] == "memory"
    assert CLIENT_SECRET not in _line(settings)
    del environ["GATEWAY_OIDC_CLIENT_SECRET"]
    environ["GATEWAY_SIGNIN_STATE_DIR"] = str(tmp_path)
    public = public_summary(Settings.from_environ(environ))["signin"]
    assert (public["client_secret"], public["store"]) == ("none (public client, PKCE)", "sqlite file")


def test_several_upstreams_are_named_with_their_provider(tmp_path: Path) -> None:
    (tmp_path / "upstreams.yaml").write_text(UPSTREAMS)
    settings = Settings.from_environ(
        {
            "GATEWAY_API_KEYS": "sk-gw-inbound",
            "GATEWAY_UPSTREAMS_FILE": str(tmp_path / "upstreams.yaml"),
            "FIRST_KEY": "sk-ant-first-upstream-key",
            "AWS_REGION": "eu-west-1",
        }
    )
    summary = public_summary(settings)
    assert summary["upstreams"] == [
        {
            "name": "bedrock-us",
            "provider": "bedrock",
            "region": "us-west-2",
            "base_url": "https://bedrock-runtime.us-west-2.amazonaws.com",
            "credential_source": "AWS default chain (shared files, SSO, instance metadata)",
        },
        {
            "name": "first",
            "provider": "anthropic",
            "base_url": "https://api.anthropic.com",
            "credential_source": "ANTHROPIC_API_KEY",
        },
    ]
    # the environment's own provider serves nothing: not shown as if it did
    assert not {"provider", "base_url", "region", "credential_source"} & set(summary)
    assert "sk-ant-first-upstream-key" not in _line(settings)


def test_without_the_fleet_the_line_has_no_fleet_keys() -> None:
    summary = public_summary(Settings.from_environ({"GATEWAY_API_KEYS": "k", "ANTHROPIC_API_KEY": "u"}))
    assert not {"signin", "policy", "upstreams", "otlp_forward"} & set(summary)


def test_a_query_in_a_logged_url_has_its_values_masked() -> None:
    """An API gateway's key in the base URL's query (Azure API Management's ``subscription-key``),
    a Redis password as a URL option: logged masked, like URL userinfo."""
    settings = Settings.from_environ(
        {
            "GATEWAY_API_KEYS": "k",
            "ANTHROPIC_API_KEY": "u",
            "ANTHROPIC_BASE_URL": "https://apim.corp.example/anthropic?subscription-key=qs-secret-41",
            "GATEWAY_SESSION_STORE": "redis://redis.corp:6379/0?password=qs-secret-42",
        }
    )
    summary = public_summary(settings)
    assert summary["base_url"] == "https://apim.corp.example/anthropic?subscription-key=***"
    assert summary["session_store"] == "redis://redis.corp:6379/0?password=***"
    assert "qs-secret" not in _line(settings)
