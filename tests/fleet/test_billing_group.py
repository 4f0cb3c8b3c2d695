"""``GATEWAY_BILLING_GROUP_TAG`` on a real gateway in front of the first-party, Bedrock and Vertex
emulators, with a signed-in user's bearer (minted by the gateway's own token code): the claim is in
the token; ``tags[<tag>]`` naming one of the caller's groups picks the group pool that pays, any
other value is ignored (and counted); ``tags`` and the request-tags beta never reach Bedrock or
Vertex (they reject both: providers.md s10, the emulators enforce it)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import pytest

from gateway.config import ConfigError, Settings
from gateway.fleet.signing_keys import SigningKey
from gateway.fleet.tokens import Identity, TokenSigner
from tests.support.provider_stack import GATEWAY_KEY, provider_stack

PUBLIC_URL = "http://127.0.0.1:9"  # the tokens' issuer; the IdP is never asked (no sign-in here)
KEY = SigningKey("k1", "a-signing-secret-of-at-least-32-characters!")
METRICS_KEY = "sk-billing-metrics"
POLICY = """
groups:
  - {group: eng, pool: {monthly_usd: 0}}
  - {group: platform, pool: {monthly_usd: 1000}}
"""
U = "anthropic-ratelimit-unified-"
REQUEST_TAGS_BETA = "request-tags-2026-08-21"


def signin_env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "signing-keys").write_text(f"{KEY.kid} {KEY.secret}\n")
    (tmp_path / "policy.yaml").write_text(POLICY)
    return {
        "GATEWAY_OIDC_ISSUER": "http://127.0.0.1:9/idp",
        "GATEWAY_OIDC_CLIENT_ID": "switchyard",
        "GATEWAY_PUBLIC_URL": PUBLIC_URL,
        "GATEWAY_ALLOW_INSECURE_LOOPBACK": "1",
        "GATEWAY_TOKEN_SIGNING_KEYS_FILE": str(tmp_path / "signing-keys"),
        "GATEWAY_POLICY_FILE": str(tmp_path / "policy.yaml"),
        "GATEWAY_BILLING_GROUP_TAG": "team",
        "GATEWAY_METRICS_API_KEYS": METRICS_KEY,
    }


def bearer(tag: str | None = "team") -> str:
    signer = TokenSigner([KEY], PUBLIC_URL, 3600, time.time, tag)
    token, _ = signer.mint(Identity("idp|ann", "ann@example.com", ("eng", "platform")), "family-1")
    return token


@pytest.mark.parametrize("provider", ["anthropic", "bedrock", "vertex"])
async def test_the_tag_picks_the_paying_group_and_never_reaches_bedrock_or_vertex(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        provider_stack(provider, tmp_path, monkeypatch, **signin_env(tmp_path)) as stack,
        anthropic.AsyncAnthropic(
            auth_token=bearer(), base_url=stack.gateway.base_url, max_retries=0
        ) as client,
    ):

        async def send(tags: Any, beta: bool = False) -> Any:
            extra = {} if tags is None else {"tags": tags}
            headers = {"anthropic-beta": REQUEST_TAGS_BETA} if beta else {}
            return await client.messages.with_raw_response.create(
                model="claude-sonnet-4-5",
                max_tokens=16,
                messages=[{"role": "user", "content": "hi"}],
                extra_body=extra,
                extra_headers=headers,
            )

        paid = await send({"team": "platform"})  # only platform's pool counts: allowed
        assert paid.status_code == 200 and paid.headers[U + "status"] == "allowed"
        assert (await send({"team": "platform", "cost-centre": "x"}, beta=True)).status_code == 200
        for tags in (None, {"team": "sales"}, {"team": ["platform"]}, {"other": "platform"}):
            with pytest.raises(anthropic.RateLimitError) as refused:  # every pool: eng's is 0
                await send(tags)
            assert refused.value.response.headers[U + "overage-scope"] == "group_pool"
            assert refused.value.body["error"]["type"] == "billing_error"  # type: ignore[index]
        sent = stack.model_requests()
        assert len(sent) == 2  # the refusals never went upstream
        for upstream in sent:
            body = upstream.json()
            betas = ",".join(upstream.header_values("anthropic-beta")) + str(body.get("anthropic_beta", ""))
            if provider == "anthropic":
                assert body["tags"]["team"] == "platform"  # the first-party API takes tags
            else:
                assert "tags" not in body and REQUEST_TAGS_BETA not in betas
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{stack.gateway.base_url}/metrics", headers={"x-api-key": METRICS_KEY}) as response,
        ):
            exposition = await response.text()
    counts = dict(re.findall(r'gateway_fleet_billing_group_tags_total\{outcome="(\w+)"\} (\S+)', exposition))
    assert counts == {"applied": "2.0", "ignored": "2.0"}


def test_minted_tokens_carry_the_claim_only_when_configured() -> None:
    from joserfc import jwt
    from joserfc.jwk import OctKey

    def claims(token: str) -> dict[str, Any]:
        return dict(jwt.decode(token, OctKey.import_key(KEY.secret), algorithms=["HS256"]).claims)

    assert claims(bearer())["billing_group_tag"] == "team"
    assert "billing_group_tag" not in claims(bearer(None))


@pytest.mark.parametrize("value", ["anthropic-team", "Anthropic", "a b", "x" * 65, "tëam"])
def test_a_tag_name_outside_the_rule_is_refused_at_start_up(value: str) -> None:
    with pytest.raises(ConfigError, match="GATEWAY_BILLING_GROUP_TAG"):
        Settings.from_environ(
            {"GATEWAY_API_KEYS": GATEWAY_KEY, "ANTHROPIC_API_KEY": "sk-x", "GATEWAY_BILLING_GROUP_TAG": value}
        )
    assert (
        Settings.from_environ(
            {
                "GATEWAY_API_KEYS": GATEWAY_KEY,
                "ANTHROPIC_API_KEY": "sk-x",
                "GATEWAY_BILLING_GROUP_TAG": "a:b/c=d+e-f@g_h.i",
            }
        ).signin.billing_group_tag
        == "a:b/c=d+e-f@g_h.i"
    )
