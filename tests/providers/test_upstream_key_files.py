"""Upstream keys read from files are re-read when the upstream refuses them: a Kubernetes secret
rotated under a running gateway (GATEWAY_FOUNDRY_API_KEY_FILE, GATEWAY_BEDROCK_BEARER_TOKEN_FILE).

The emulators are told to accept only a new key (their own configuration, as a provider's console
revokes a key), the file is rewritten, and the next request through the anthropic SDK gets its
200 after one internal credential retry, with no restart. A file left as it was means the 401 is
relayed once (no loop); an unreadable file keeps the key in use and logs one warning naming the
file, never a key.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
import pytest

from emulators import RunningEmulator
from emulators.bedrock_config import DEFAULT_API_KEY, BedrockOptions, accept_bedrock_api_keys
from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import running
from gateway.providers.bedrock import BedrockProvider
from gateway.providers.foundry import FoundryProvider
from tests.providers.bedrock_harness import apply_aws_env, bedrock_upstream
from tests.providers.foundry_harness import foundry_upstream

pytestmark = pytest.mark.timeout(60)

GATEWAY_KEY = "sk-gw-key-files"
MODEL = "claude-sonnet-4-5"
MESSAGES: list[anthropic.types.MessageParam] = [{"role": "user", "content": "hi"}]
FOUNDRY_KEY = "foundry-key-original-0001"
NEW_FOUNDRY_KEY = "foundry-key-rotated-0002"
NEW_BEDROCK_KEY = "bedrock-api-key-rotated-0002"


class Gateway:
    """A gateway in this event loop, its metrics, and an SDK client (no SDK retries)."""

    def __init__(self, client: anthropic.AsyncAnthropic, metrics: GatewayMetrics, provider: str) -> None:
        self.client = client
        self.metrics = metrics
        self.provider = provider

    async def ask(self) -> tuple[int, str]:
        """Status and ``x-gateway-retries`` of one Messages request."""
        try:
            raw = await self.client.messages.with_raw_response.create(
                model=MODEL, max_tokens=8, messages=MESSAGES
            )
        except anthropic.APIStatusError as exc:
            return exc.status_code, exc.response.headers.get("x-gateway-retries", "")
        assert (await raw.parse()).content
        return raw.status_code, raw.headers["x-gateway-retries"]

    def credential_retries(self) -> float:
        value = self.metrics.registry.get_sample_value(
            "gateway_upstream_retries_total", {"provider": self.provider, "reason": "credential_refresh"}
        )
        return value or 0.0


@contextlib.asynccontextmanager
async def _gateway(settings: Settings, provider: FoundryProvider | BedrockProvider) -> AsyncIterator[Gateway]:
    metrics = GatewayMetrics()
    async with (
        running(create_app(settings, provider, metrics=metrics), "127.0.0.1", 0) as server,
        anthropic.AsyncAnthropic(api_key=GATEWAY_KEY, base_url=server.base_url, max_retries=0) as client,
    ):
        yield Gateway(client, metrics, provider.name)


@contextlib.asynccontextmanager
async def _foundry(tmp_path: Path) -> AsyncIterator[tuple[Gateway, RunningEmulator, Path]]:
    """Foundry emulator and a gateway whose Foundry key is only in ``key_file``."""
    key_file = tmp_path / "mounted-secret"
    key_file.write_text(FOUNDRY_KEY + "\n")
    async with foundry_upstream(tmp_path, foundry_api_keys=frozenset({FOUNDRY_KEY})) as (env, emulator):
        del env["ANTHROPIC_FOUNDRY_API_KEY"]
        settings = Settings.from_environ(
            {**env, "GATEWAY_API_KEYS": GATEWAY_KEY, "GATEWAY_FOUNDRY_API_KEY_FILE": str(key_file)}
        )
        async with _gateway(settings, FoundryProvider(settings)) as gateway:
            yield gateway, emulator, key_file


def _foundry_keys(emulator: RunningEmulator) -> list[str | None]:
    return [r.header("x-api-key") for r in emulator.requests if r.method == "POST"]


async def test_a_rotated_foundry_key_file_is_read_at_the_first_refusal(tmp_path: Path) -> None:
    async with _foundry(tmp_path) as (gateway, emulator, key_file):
        assert await gateway.ask() == (200, "0")
        emulator.accept_keys(foundry_api_keys=frozenset({NEW_FOUNDRY_KEY}))  # the old key revoked
        key_file.write_text(NEW_FOUNDRY_KEY + "\n")  # the secret volume updated
        assert await gateway.ask() == (200, "1")
        assert gateway.credential_retries() == 1
        assert await gateway.ask() == (200, "0")  # the new key is the one in use now
        assert _foundry_keys(emulator) == [FOUNDRY_KEY, FOUNDRY_KEY, NEW_FOUNDRY_KEY, NEW_FOUNDRY_KEY]


async def test_an_unchanged_key_file_relays_the_refusal_without_retrying(tmp_path: Path) -> None:
    async with _foundry(tmp_path) as (gateway, emulator, _):
        emulator.accept_keys(foundry_api_keys=frozenset({NEW_FOUNDRY_KEY}))  # the file not updated yet
        assert await gateway.ask() == (401, "0")
        assert await gateway.ask() == (401, "0")
        assert gateway.credential_retries() == 0
        assert _foundry_keys(emulator) == [FOUNDRY_KEY, FOUNDRY_KEY]  # one attempt each


async def test_an_unreadable_key_file_keeps_the_key_and_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with _foundry(tmp_path) as (gateway, emulator, key_file):
        emulator.accept_keys(foundry_api_keys=frozenset({NEW_FOUNDRY_KEY}))
        key_file.write_text("\n")  # truncated while the secret is being rewritten
        assert await gateway.ask() == (401, "0")
        key_file.unlink()  # then gone: another cause, one more warning
        assert await gateway.ask() == (401, "0")
        assert await gateway.ask() == (401, "0")
        warnings = [r.getMessage() for r in caplog.records if r.name == "switchyard.upstream_keys"]
        assert warnings == [
            f"upstream key file {key_file} (GATEWAY_FOUNDRY_API_KEY_FILE) not re-read (refused by the "
            "upstream): the file must hold one key on one line; keeping the key in use",
            f"upstream key file {key_file} (GATEWAY_FOUNDRY_API_KEY_FILE) not re-read (refused by the "
            "upstream): cannot read it (FileNotFoundError); keeping the key in use",
        ]
        assert _foundry_keys(emulator) == [FOUNDRY_KEY] * 3  # still the key of start-up
        key_file.write_text(NEW_FOUNDRY_KEY)
        assert await gateway.ask() == (200, "1")
    assert FOUNDRY_KEY not in caplog.text and NEW_FOUNDRY_KEY not in caplog.text


async def test_a_rotated_bedrock_api_key_file_is_read_at_the_first_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "bedrock-token"
    token_file.write_text(DEFAULT_API_KEY + "\n")
    async with bedrock_upstream(tmp_path, options=BedrockOptions(credentials={}), static_keys=False) as (
        env,
        emulator,
    ):
        apply_aws_env(monkeypatch, env)
        settings = Settings.from_environ(
            {**env, "GATEWAY_API_KEYS": GATEWAY_KEY, "GATEWAY_BEDROCK_BEARER_TOKEN_FILE": str(token_file)}
        )
        async with _gateway(settings, BedrockProvider(settings)) as gateway:
            assert await gateway.ask() == (200, "0")
            accept_bedrock_api_keys(emulator.app, frozenset({NEW_BEDROCK_KEY}))
            assert await gateway.ask() == (401, "0")  # the file not updated yet: the refusal relayed
            token_file.write_text(NEW_BEDROCK_KEY + "\n")
            assert await gateway.ask() == (200, "1")
            assert gateway.credential_retries() == 1
            assert await gateway.ask() == (200, "0")
        bearers = [r.header("Authorization") for r in emulator.requests if r.method == "POST"]
        old, new = f"Bearer {DEFAULT_API_KEY}", f"Bearer {NEW_BEDROCK_KEY}"
        assert bearers == [old, old, old, new, new]
