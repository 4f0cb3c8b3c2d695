"""botocore's real credential chain behind the gateway: env keys, a profile file, web identity via
the emulator's STS, container credentials, a Bedrock API key; refresh before expiry; failures.

Refresh timing: botocore decides with the real wall clock, refreshing temporary credentials that
expire within 15 minutes (advisory: a failure keeps the old ones) and insisting within 10 minutes
(mandatory: a failure is an error). The emulator's STS issues credentials that expire
``issued_lifetime_s`` after its own clock; with a ``ManualClock`` started at the real time, 11
minutes puts fresh credentials straight into botocore's advisory window (the next request
refreshes), and advancing the emulator's clock makes the *upstream* consider older credentials
expired without any real waiting.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import aiohttp
import anthropic
import pytest
from anthropic.types import MessageParam
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from emulators import EmulatorConfig, ManualClock
from emulators.bedrock_config import (
    DEFAULT_API_KEY,
    DEFAULT_CONTAINER_TOKEN,
    DEFAULT_WEB_IDENTITY_TOKEN,
    BedrockOptions,
    get_bedrock_state,
)
from gateway.config import Settings
from gateway.providers.bedrock_auth import SigV4ChainAuth
from tests.providers.bedrock_harness import (
    GATEWAY_KEY,
    apply_aws_env,
    bedrock_gateway,
    bedrock_upstream,
    isolated_aws_files,
)

MODEL = "claude-sonnet-4-6"
PROFILE_KEY = ("AKIDPROFILE00000001", "profile-secret-key")
MESSAGES: list[MessageParam] = [{"role": "user", "content": "hi"}]


def write(path: str | Path, text: str) -> None:
    """Replace a credentials/token file (small and local: fine inside a test's event loop)."""
    Path(path).write_text(text)


def client(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key=GATEWAY_KEY, base_url=url, max_retries=0)


def access_key_of(request: object) -> str:
    authorization = request.header("Authorization")  # type: ignore[attr-defined]
    return str(authorization).split("Credential=", 1)[1].split("/", 1)[0]


def web_identity_env(
    tmp_path: Path, emulator_url: str, token: str = "emu-web-identity-token"
) -> dict[str, str]:
    token_file = tmp_path / "web-identity-token"
    token_file.write_text(token)
    return {
        "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/switchyard",
        "AWS_ROLE_SESSION_NAME": "gateway",
        "AWS_WEB_IDENTITY_TOKEN_FILE": str(token_file),
        "AWS_ENDPOINT_URL_STS": emulator_url,
    }


async def test_environment_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with bedrock_upstream(tmp_path) as (env, emu):
        apply_aws_env(monkeypatch, env)
        async with bedrock_gateway(env) as (server, provider):
            assert provider.describe()["credential_source"] == "env"
            assert provider.not_ready_reason() is None
            await client(server.base_url).messages.create(model=MODEL, max_tokens=8, messages=MESSAGES)
            assert access_key_of(emu.requests[-1]) == "AKIDEXAMPLE"


async def test_shared_credentials_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    options = BedrockOptions(credentials={PROFILE_KEY[0]: PROFILE_KEY[1]})
    async with bedrock_upstream(tmp_path, options=options, static_keys=False) as (env, emu):
        write(
            env["AWS_SHARED_CREDENTIALS_FILE"],
            f"[default]\naws_access_key_id = AKIDWRONG\naws_secret_access_key = x\n\n"
            f"[gateway]\naws_access_key_id = {PROFILE_KEY[0]}\naws_secret_access_key = {PROFILE_KEY[1]}\n",
        )
        env["AWS_PROFILE"] = "gateway"
        apply_aws_env(monkeypatch, env)
        async with bedrock_gateway(env) as (server, provider):
            assert provider.describe()["credential_source"] == "shared-credentials-file"
            await client(server.base_url).messages.create(model=MODEL, max_tokens=8, messages=MESSAGES)
            assert access_key_of(emu.requests[-1]) == PROFILE_KEY[0]


async def test_rotated_profile_keys_are_reloaded_after_a_401(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = BedrockOptions(credentials={PROFILE_KEY[0]: PROFILE_KEY[1]})
    async with bedrock_upstream(tmp_path, options=options, static_keys=False) as (env, emu):
        credentials_file = env["AWS_SHARED_CREDENTIALS_FILE"]
        write(credentials_file, "[default]\naws_access_key_id = AKIDREVOKED\naws_secret_access_key = old\n")
        apply_aws_env(monkeypatch, env)
        async with bedrock_gateway(env) as (server, _):
            write(
                credentials_file,
                f"[default]\naws_access_key_id = {PROFILE_KEY[0]}\naws_secret_access_key = {PROFILE_KEY[1]}\n",
            )
            raw = await client(server.base_url).messages.with_raw_response.create(
                model=MODEL,
                max_tokens=8,
                messages=MESSAGES,
            )
            assert raw.status_code == 200 and raw.headers["x-gateway-retries"] == "1"
            assert [access_key_of(r) for r in emu.requests] == ["AKIDREVOKED", PROFILE_KEY[0]]


async def test_web_identity_through_the_emulator_sts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with bedrock_upstream(tmp_path, static_keys=False) as (env, emu):
        env.update(web_identity_env(tmp_path, emu.base_url))
        apply_aws_env(monkeypatch, env)
        async with bedrock_gateway(env, GATEWAY_LOG_LEVEL="DEBUG") as (server, provider):
            assert provider.describe()["credential_source"] == "assume-role-with-web-identity"
            async with client(server.base_url).messages.stream(
                model=MODEL,
                max_tokens=8,
                messages=MESSAGES,
            ) as stream:
                await stream.get_final_message()
        issuer = get_bedrock_state(emu.app).issuer
        (issued,) = issuer.issued()
        upstream = emu.requests[-1]
        assert access_key_of(upstream) == issued.access_key_id
        assert upstream.header("X-Amz-Security-Token") == issued.session_token
        sts_call = next(r for r in emu.requests if r.path == "/")
        assert b"Action=AssumeRoleWithWebIdentity" in sts_call.body
    assert issued.secret_access_key not in caplog.text
    assert issued.session_token not in caplog.text


async def test_expiring_credentials_are_refreshed_before_the_upstream_rejects_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(start=time.time())
    options = BedrockOptions(issued_lifetime_s=11 * 60)
    async with bedrock_upstream(
        tmp_path, config=EmulatorConfig(clock=clock), options=options, static_keys=False
    ) as (
        env,
        emu,
    ):
        env.update(web_identity_env(tmp_path, emu.base_url))
        apply_aws_env(monkeypatch, env)
        issuer = get_bedrock_state(emu.app).issuer
        async with bedrock_gateway(env) as (server, _):
            sdk = client(server.base_url)
            await sdk.messages.create(model=MODEL, max_tokens=8, messages=MESSAGES)
            first = issuer.issued()[0]
            clock.advance(5 * 60)  # first credentials: 6 minutes left upstream, inside botocore's window
            await sdk.messages.create(model=MODEL, max_tokens=8, messages=MESSAGES)
            second = issuer.issued()[-1]
            assert second.access_key_id != first.access_key_id
            assert access_key_of(emu.requests[-1]) == second.access_key_id
            clock.advance(6 * 60)  # now the first credentials are expired upstream; the second are not
            for _ in range(3):
                await sdk.messages.create(model=MODEL, max_tokens=8, messages=MESSAGES)
            assert access_key_of(emu.requests[-1]) != first.access_key_id
            assert [r.path for r in emu.requests].count("/") == issuer.sts_calls >= 2
            # ...and had the gateway kept the first credentials, the upstream would have refused them
            status, error_type = await _signed_with(
                emu.base_url, first.access_key_id, first.secret_access_key, first.session_token
            )
            assert (status, error_type) == (403, "ExpiredTokenException")


async def _signed_with(base_url: str, akid: str, secret: str, token: str) -> tuple[int, str]:
    body = b'{"anthropic_version":"bedrock-2023-05-31","max_tokens":8,"messages":[{"role":"user","content":"x"}]}'
    request = AWSRequest("POST", f"{base_url}/model/us.anthropic.claude-sonnet-4-6/invoke", data=body)
    SigV4Auth(Credentials(akid, secret, token), "bedrock", "us-east-1").add_auth(request)
    async with (
        aiohttp.ClientSession() as http,
        http.post(request.url, data=body, headers=dict(request.headers.items())) as response,
    ):
        return response.status, response.headers.get("x-amzn-ErrorType", "").split(":")[0]


async def test_credentials_that_cannot_be_refreshed_are_401(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(start=time.time())
    options = BedrockOptions(issued_lifetime_s=5 * 60)  # inside botocore's mandatory window at once
    async with bedrock_upstream(
        tmp_path, config=EmulatorConfig(clock=clock), options=options, static_keys=False
    ) as (
        env,
        emu,
    ):
        env.update(web_identity_env(tmp_path, emu.base_url))
        apply_aws_env(monkeypatch, env)
        async with bedrock_gateway(env, GATEWAY_CREDENTIAL_RECHECK_S="0.001") as (server, provider):
            sdk = client(server.base_url)
            await sdk.messages.create(model=MODEL, max_tokens=8, messages=MESSAGES)
            write(env["AWS_WEB_IDENTITY_TOKEN_FILE"], "revoked-token")
            for failures in range(1, 4):  # the default threshold: 3 consecutive failed fetches
                assert provider.not_ready_reason() is None
                with pytest.raises(anthropic.AuthenticationError) as info:
                    await sdk.messages.create(model=MODEL, max_tokens=8, messages=MESSAGES)
                assert info.value.response.headers["x-should-retry"] == "false"
                assert info.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
                assert "STS (AssumeRoleWithWebIdentity)" in info.value.message
                assert "InvalidIdentityToken" in info.value.message
                assert provider.auth.health.consecutive_failures == failures  # type: ignore[attr-defined]
            async with aiohttp.ClientSession() as http, http.get(f"{server.base_url}/readyz") as response:
                assert response.status == 503
                reason = (await response.json())["reason"]
            # /readyz itself retried the fetch (the recheck interval had passed): a fourth failure
            assert "4 consecutive failures" in reason and "InvalidIdentityToken" in reason
            write(
                env["AWS_WEB_IDENTITY_TOKEN_FILE"], DEFAULT_WEB_IDENTITY_TOKEN
            )  # fixed: /readyz retries and recovers
            async with aiohttp.ClientSession() as http, http.get(f"{server.base_url}/readyz") as response:
                assert response.status == 200
            assert provider.not_ready_reason() is None


async def test_container_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with bedrock_upstream(tmp_path, static_keys=False) as (env, emu):
        env["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = f"{emu.base_url}/container-credentials"
        env["AWS_CONTAINER_AUTHORIZATION_TOKEN"] = DEFAULT_CONTAINER_TOKEN
        apply_aws_env(monkeypatch, env)
        async with bedrock_gateway(env) as (server, provider):
            assert provider.describe()["credential_source"] == "container-role"
            await client(server.base_url).messages.create(model=MODEL, max_tokens=8, messages=MESSAGES)
        issuer = get_bedrock_state(emu.app).issuer
        assert issuer.container_calls == 1
        assert access_key_of(emu.requests[-1]) == issuer.issued()[0].access_key_id


async def test_bedrock_api_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with bedrock_upstream(tmp_path, static_keys=False) as (env, emu):
        apply_aws_env(monkeypatch, env)
        async with bedrock_gateway(env, AWS_BEARER_TOKEN_BEDROCK=DEFAULT_API_KEY) as (server, provider):
            assert provider.describe()["credential_source"] == "bearer-token"
            assert DEFAULT_API_KEY not in str(provider.describe())
            await client(server.base_url).messages.create(model=MODEL, max_tokens=8, messages=MESSAGES)
        assert emu.requests[-1].header("Authorization") == f"Bearer {DEFAULT_API_KEY}"
        assert emu.requests[-1].header("X-Amz-Date") is None


async def test_no_credentials_is_not_ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with bedrock_upstream(tmp_path, static_keys=False) as (env, emu):
        apply_aws_env(monkeypatch, env)
        async with bedrock_gateway(env) as (server, provider):
            reason = provider.not_ready_reason()
            assert reason is not None and "AWS_ACCESS_KEY_ID" in reason
            async with aiohttp.ClientSession() as http, http.get(f"{server.base_url}/readyz") as response:
                assert response.status == 503
            with pytest.raises(anthropic.APIStatusError) as info:
                await client(server.base_url).messages.create(model=MODEL, max_tokens=8, messages=MESSAGES)
            assert info.value.status_code == 503
            assert info.value.response.headers["x-should-retry"] == "false"
        assert not emu.requests


async def test_concurrent_first_requests_share_one_sts_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with bedrock_upstream(tmp_path, static_keys=False) as (env, emu):
        env.update(web_identity_env(tmp_path, emu.base_url))
        apply_aws_env(monkeypatch, env)
        async with bedrock_gateway(env) as (server, _):
            sdk = client(server.base_url)
            await asyncio.gather(
                *(sdk.messages.create(model=MODEL, max_tokens=8, messages=MESSAGES) for _ in range(12))
            )
        assert get_bedrock_state(emu.app).issuer.sts_calls == 1
        assert len({access_key_of(r) for r in emu.requests if r.path != "/"}) == 1


def _write(path: Path, text: str) -> None:
    path.write_text(text)


async def test_a_profile_removed_from_its_file_while_running_keeps_the_resolved_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A reload (after an upstream 401/403) finds the profile gone: one warning, no traceback,
    and requests keep being signed with what was resolved before."""
    env = {"GATEWAY_PROVIDER": "bedrock", "AWS_REGION": "us-east-1", **isolated_aws_files(tmp_path)}
    credentials = Path(env["AWS_SHARED_CREDENTIALS_FILE"])
    _write(
        credentials,
        "[acct]\naws_access_key_id = AKIAPROFILE000000001\naws_secret_access_key = s3cret/of/the/profile\n",
    )
    apply_aws_env(monkeypatch, env)
    settings = Settings.from_environ({**env, "AWS_PROFILE": "acct"})
    auth = SigV4ChainAuth("us-east-1", "acct", settings)
    await auth.start()
    assert (await auth.current()).access_key == "AKIAPROFILE000000001"
    _write(credentials, "[other]\naws_access_key_id = AKIAOTHER\naws_secret_access_key = x\n")
    with caplog.at_level(logging.WARNING, logger="switchyard.bedrock.auth"):
        assert await auth.reload() is False
    assert "profile 'acct' is no longer in the shared config" in caplog.text
    assert "s3cret" not in caplog.text
    assert (await auth.current()).access_key == "AKIAPROFILE000000001"
    await auth.close()
