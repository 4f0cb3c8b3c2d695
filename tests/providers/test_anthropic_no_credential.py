"""The first-party provider without ``ANTHROPIC_API_KEY`` (or ``ANTHROPIC_AUTH_TOKEN``): it starts,
as Bedrock without credentials does, but says so once at start-up (it used to start silently, the
only hint a ``credential_source: none`` in the configuration line), is not ready, and answers
every API request 503."""

from __future__ import annotations

import logging

import pytest

from gateway.config import Settings
from gateway.errors import GatewayError
from gateway.providers.anthropic import AnthropicProvider
from gateway.providers.base import ClientRequest, Operation

pytestmark = pytest.mark.timeout(30)


async def test_a_missing_key_is_said_at_start_up(caplog: pytest.LogCaptureFixture) -> None:
    provider = AnthropicProvider(Settings.from_environ({"GATEWAY_API_KEYS": "k"}))
    with caplog.at_level(logging.WARNING, logger="switchyard.providers.anthropic"):
        await provider.start()
    try:
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and warnings[0].startswith("ANTHROPIC_API_KEY: not set"), warnings
        assert (
            provider.not_ready_reason()
            == "no upstream credential: set ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN"
        )
        body = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi"}],
        }
        request = ClientRequest(
            operation=Operation.MESSAGES, body=b"{}", payload=body, headers=[], request_id="r"
        )
        with pytest.raises(GatewayError) as info:
            await provider.messages(provider.prepare(request))
        assert info.value.status == 503
    finally:
        await provider.close()


async def test_with_a_key_nothing_is_said(caplog: pytest.LogCaptureFixture) -> None:
    provider = AnthropicProvider(
        Settings.from_environ({"GATEWAY_API_KEYS": "k", "ANTHROPIC_API_KEY": "sk-x"})
    )
    with caplog.at_level(logging.WARNING, logger="switchyard.providers.anthropic"):
        await provider.start()
    await provider.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
