"""Real google-auth against the emulator's token endpoint: first refresh, expiry, failures, ADC."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import pytest

from emulators import ManualClock
from gateway.config import ConfigError, Settings
from gateway.providers.vertex import VertexProvider
from tests.providers.vertex_harness import (
    GATEWAY_KEY,
    PROJECT,
    google_auth_follows,
    other_key,
    predict_requests,
    token_requests,
    vertex_gateway,
    vertex_upstream,
    write_service_account,
)

MODEL = "claude-haiku-4-5"
USER: Any = [{"role": "user", "content": "ping"}]


def _client(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key=GATEWAY_KEY, base_url=url, max_retries=0)


def _bearers(emulator: Any) -> list[str]:
    return [r.header("authorization") for r in predict_requests(emulator)]


async def test_token_expiry_mid_run_refreshes_without_a_failed_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock()
    google_auth_follows(monkeypatch, clock)
    async with (
        vertex_upstream(tmp_path, monkeypatch, clock=clock, vertex_token_lifetime_s=3600) as (env, emulator),
        vertex_gateway(env, clock=clock.time) as url,
        _client(url) as client,
    ):
        await client.messages.create(model=MODEL, max_tokens=8, messages=USER)
        await client.messages.create(model=MODEL, max_tokens=8, messages=USER)
        assert token_requests(emulator) == 1
        clock.advance(3400)  # inside the refresh margin, still valid at the emulator
        await client.messages.create(model=MODEL, max_tokens=8, messages=USER)
        clock.advance(250)  # the first token has now expired at the emulator
        async with client.messages.stream(model=MODEL, max_tokens=8, messages=USER) as stream:
            await stream.get_final_message()
        assert token_requests(emulator) == 2
        first, second, third, fourth = _bearers(emulator)
        assert first == second != third == fourth
        assert all(r.path_only != "/token" for r in predict_requests(emulator))


async def test_token_rejected_before_the_gateway_expected_is_refreshed_and_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The emulator's clock runs ahead of the gateway's: Vertex answers 401, the gateway refreshes
    its token once and retries; the client never sees the 401."""
    clock = ManualClock()
    google_auth_follows(monkeypatch, clock)
    frozen = clock.time()
    async with (
        vertex_upstream(tmp_path, monkeypatch, clock=clock) as (env, emulator),
        vertex_gateway(env, clock=lambda: frozen) as url,
        _client(url) as client,
    ):
        await client.messages.create(model=MODEL, max_tokens=8, messages=USER)
        clock.advance(3601)
        response = await client.messages.with_raw_response.create(model=MODEL, max_tokens=8, messages=USER)
        assert response.status_code == 200 and response.headers["x-gateway-retries"] == "1"
        assert token_requests(emulator) == 2
        statuses = [r.header("authorization") for r in predict_requests(emulator)]
        assert len(statuses) == 3 and statuses[1] != statuses[2]


async def test_credential_that_cannot_be_refreshed_is_401_without_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with vertex_upstream(tmp_path, monkeypatch) as (env, emulator):
        revoked = write_service_account(tmp_path, emulator.base_url + "/token", key=other_key())
        async with (
            vertex_gateway({**env, "GOOGLE_APPLICATION_CREDENTIALS": str(revoked)}) as url,
            _client(url) as client,
        ):
            with pytest.raises(anthropic.AuthenticationError) as info:
                await client.messages.create(model=MODEL, max_tokens=8, messages=USER)
    assert info.value.type == "authentication_error"
    assert info.value.response.headers["x-should-retry"] == "false"
    assert "Invalid JWT" not in info.value.message
    assert token_requests(emulator) == 1 and not predict_requests(emulator)


async def test_application_default_credentials_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No GOOGLE_APPLICATION_CREDENTIALS in the settings: ``google.auth.default()`` finds the file
    through ``os.environ`` (the harness set it) and the project comes from the key file."""
    async with vertex_upstream(tmp_path, monkeypatch) as (env, emulator):
        adc_env = {
            k: v
            for k, v in env.items()
            if k not in ("GOOGLE_APPLICATION_CREDENTIALS", "ANTHROPIC_VERTEX_PROJECT_ID")
        }
        async with vertex_gateway(adc_env) as url, _client(url) as client:
            message = await client.messages.create(model=MODEL, max_tokens=8, messages=USER)
    assert message.content
    assert f"/projects/{PROJECT}/" in predict_requests(emulator)[0].path


async def test_missing_project_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with vertex_upstream(tmp_path, monkeypatch, key_project=None) as (env, _):
        settings = Settings.from_environ(
            {
                "GATEWAY_API_KEYS": GATEWAY_KEY,
                **{k: v for k, v in env.items() if k != "ANTHROPIC_VERTEX_PROJECT_ID"},
            }
        )
        provider = VertexProvider(settings)
        with pytest.raises(ConfigError, match="ANTHROPIC_VERTEX_PROJECT_ID"):
            await provider.start()
        await provider.close()


async def test_missing_credentials_file_is_a_config_error(tmp_path: Path) -> None:
    broken = tmp_path / "not-a-key.json"
    broken.write_text('{"type": "nonsense"}')
    settings = Settings.from_environ(
        {
            "GATEWAY_API_KEYS": GATEWAY_KEY,
            "GATEWAY_PROVIDER": "vertex",
            "CLOUD_ML_REGION": "us-east5",
            "ANTHROPIC_VERTEX_PROJECT_ID": PROJECT,
            "GOOGLE_APPLICATION_CREDENTIALS": str(broken),
        }
    )
    provider = VertexProvider(settings)
    with pytest.raises(ConfigError, match="GOOGLE_APPLICATION_CREDENTIALS"):
        await provider.start()
    assert provider.not_ready_reason() is not None


async def test_describe_names_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with vertex_upstream(tmp_path, monkeypatch) as (env, _):
        provider = VertexProvider(Settings.from_environ({"GATEWAY_API_KEYS": GATEWAY_KEY, **env}))
        await provider.start()
        try:
            described = provider.describe()
        finally:
            await provider.close()
    assert (
        described["project"] == PROJECT and described["credential_source"] == "GOOGLE_APPLICATION_CREDENTIALS"
    )
    assert described["base_url"] == env["ANTHROPIC_VERTEX_BASE_URL"]
    assert provider.not_ready_reason() is None


async def test_unknown_service_account_is_named_and_turns_readiness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The token endpoint does not know the account: the client is told so (not "expired"), and
    after GATEWAY_CREDENTIAL_FAILURES_NOT_READY failed fetches /readyz says why."""
    stranger = "someone-else@switchyard-test.iam.gserviceaccount.com"
    async with vertex_upstream(tmp_path, monkeypatch) as (env, emulator):
        account = write_service_account(tmp_path, emulator.base_url + "/token", email=stranger)
        async with (
            vertex_gateway(
                {**env, "GOOGLE_APPLICATION_CREDENTIALS": str(account)},
                GATEWAY_CREDENTIAL_FAILURES_NOT_READY="2",
                GATEWAY_CREDENTIAL_RECHECK_S="3600",
            ) as url,
            _client(url) as client,
        ):
            for _ in range(2):
                with pytest.raises(anthropic.AuthenticationError) as info:
                    await client.messages.create(model=MODEL, max_tokens=8, messages=USER)
                assert f"unknown service account {stranger}" in info.value.message
                assert "expired" not in info.value.message
                assert info.value.response.headers["x-should-retry"] == "false"
            async with aiohttp.ClientSession() as http, http.get(f"{url}/readyz") as response:
                assert response.status == 503
                reason = (await response.json())["reason"]
    assert "2 consecutive failures" in reason and f"unknown service account {stranger}" in reason
    assert token_requests(emulator) == 2 and not predict_requests(emulator)  # the recheck is not due
