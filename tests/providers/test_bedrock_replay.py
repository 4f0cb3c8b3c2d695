"""Claude Code's own Bedrock-mode requests (fixtures 047/048), sent to the gateway as the
first-party requests a client would send, must reach Bedrock in the shape Claude Code produces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from emulators import EmulatorConfig, ManualClock
from gateway.streaming.sse import SSEParser
from tests.providers.bedrock_harness import GATEWAY_KEY, apply_aws_env, bedrock_gateway, bedrock_upstream

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real-clients"
FIRST_PARTY_ALIAS = "claude-sonnet-4-5"  # us.anthropic.claude-sonnet-4-5-20250929-v1:0 in us-east-1
_NOT_REPLAYED = {"content-length", "connection", "accept-encoding", "host", "anthropic-beta"}


def load(name: str) -> dict[str, Any]:
    fixture: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return fixture


def first_party_request(fixture: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The body and headers a first-party client sends for the same turn."""
    bedrock_body = fixture["body"]
    body: dict[str, Any] = {"model": FIRST_PARTY_ALIAS}
    body.update((k, v) for k, v in bedrock_body.items() if k not in ("anthropic_beta", "anthropic_version"))
    body["stream"] = True
    header_betas = [v for k, v in fixture["headers"] if k.lower() == "anthropic-beta"]
    headers = [(k, v) for k, v in fixture["headers"] if k.lower() not in _NOT_REPLAYED]
    headers.append(("anthropic-beta", ",".join([*header_betas, *bedrock_body["anthropic_beta"]])))
    headers.append(("x-api-key", GATEWAY_KEY))
    return body, headers


async def test_claude_code_bedrock_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = EmulatorConfig(clock=ManualClock())
    async with bedrock_upstream(tmp_path, config=config) as (env, emu):
        apply_aws_env(monkeypatch, env)
        async with bedrock_gateway(env) as (server, _), aiohttp.ClientSession() as http:
            usages = []
            for name in ("047_cc_bedrock_turn1", "048_cc_bedrock_turn2"):
                fixture = load(name)
                body, headers = first_party_request(fixture)
                async with http.post(
                    f"{server.base_url}/v1/messages", data=json.dumps(body), headers=headers
                ) as response:
                    assert response.status == 200
                    events = SSEParser().feed(await response.read())
                assert events[-1].event == "message_stop"
                start = json.loads(next(e.data for e in events if e.event == "message_start"))
                usages.append(start["message"]["usage"])

                upstream = emu.requests[-1]
                assert upstream.path == fixture["raw_path"]
                sent = upstream.json()
                assert list(sent) == list(fixture["body"])  # same keys, same order
                assert sent == fixture["body"]  # byte-for-byte the same JSON value
                # the header betas where Claude Code's Bedrock mode puts them (the rest: body)
                assert upstream.header("anthropic-beta") == dict(fixture["headers"])["anthropic-beta"]
                assert upstream.header("x-app") == "cli"
                assert upstream.header("X-Claude-Code-Session-Id") == "dc533593-95cd-4613-a8a1-e6de5180ec44"
    assert usages[0]["cache_creation_input_tokens"] > 0
    assert usages[1]["cache_read_input_tokens"] >= usages[0]["cache_creation_input_tokens"]
