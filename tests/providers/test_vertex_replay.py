"""Claude Code's own Vertex requests (fixtures 050/051), sent first-party through the gateway.

The fixtures are what Claude Code sends in Vertex mode. A first-party client would send the same
conversation to the gateway with ``model`` in the body and no ``anthropic_version``; the gateway
must then put on the wire what Claude Code itself produces: the same path, a body without
``model`` with ``stream: true`` and ``anthropic_version: "vertex-2023-10-16"`` (same keys, same
order, same values), and the betas in the ``anthropic-beta`` header.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.streaming.sse import SSEParser
from tests.providers.vertex_harness import GATEWAY_KEY, predict_requests, vertex_gateway, vertex_upstream

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real-clients"
SKIP_HEADERS = frozenset({"content-length", "host", "connection", "accept-encoding", "authorization"})


def _first_party(fixture: dict[str, Any]) -> tuple[bytes, list[tuple[str, str]]]:
    body = {"model": "claude-sonnet-4-5"}
    body.update({k: v for k, v in fixture["body"].items() if k != "anthropic_version"})
    headers = [(k, v) for k, v in fixture["headers"] if k.lower() not in SKIP_HEADERS]
    headers.append(("x-api-key", GATEWAY_KEY))
    return orjson.dumps(body), headers


@pytest.mark.parametrize("name", ["050_cc_vertex_turn1", "051_cc_vertex_turn2"])
async def test_claude_code_vertex_request_shape(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixture = json.loads((FIXTURES / f"{name}.json").read_text())
    project, region = fixture["raw_path"].split("/")[3], fixture["raw_path"].split("/")[5]
    body, headers = _first_party(fixture)
    async with (
        vertex_upstream(tmp_path, monkeypatch, project=project, region=region) as (env, emulator),
        vertex_gateway(env) as url,
        aiohttp.ClientSession() as session,
        session.post(url + "/v1/messages?beta=true", data=body, headers=headers) as response,
    ):
        assert response.status == 200, await response.text()
        parser = SSEParser()
        events = [event.event for event in parser.feed(await response.read())]
    assert events[0] == "message_start" and events[-1] == "message_stop"
    (sent,) = predict_requests(emulator)
    assert sent.path == fixture["raw_path"]
    received = sent.json()
    assert list(received) == list(fixture["body"])
    assert received == fixture["body"]
    assert "model" not in received and received["stream"] is True
    assert received["anthropic_version"] == "vertex-2023-10-16"
    expected_betas = dict((k.lower(), v) for k, v in fixture["headers"])["anthropic-beta"]
    assert sent.header("anthropic-beta") == expected_betas
    assert sent.header("anthropic-version") is None
    assert sent.header("x-app") == "cli"
