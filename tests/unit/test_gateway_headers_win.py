"""The gateway's own response headers (``x-client-request-id``, ``x-gateway-retries``) replace an
upstream's of the same name, streamed or not. A streamed answer carried the upstream's first
(``['spoofed', '<real>']``): clients read the first value."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web

from gateway.app import create_app
from gateway.config import Settings
from gateway.process import running
from gateway.streaming.sse import encode_event
from tests.support.local_app import serving

pytestmark = pytest.mark.timeout(30)

SPOOFED = {"x-client-request-id": "spoofed", "x-gateway-retries": "99"}


async def _answer(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    if not body.get("stream"):
        message = {"id": "m", "type": "message", "role": "assistant", "model": "x", "content": []}
        return web.json_response({**message, "stop_reason": "end_turn", "usage": {}}, headers=SPOOFED)
    response = web.StreamResponse(headers={"content-type": "text/event-stream", **SPOOFED})
    await response.prepare(request)
    start = {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant"}}
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    await response.write(encode_event("message_start", start) + encode_event("content_block_start", block))
    await response.write(encode_event("message_stop", {"type": "message_stop"}))
    await response.write_eof()
    return response


@pytest.mark.parametrize("stream", [False, True])
async def test_the_gateways_headers_replace_the_upstreams(stream: bool) -> None:
    upstream = web.Application()
    upstream.router.add_post("/v1/messages", _answer)
    async with serving(upstream) as url:
        settings = Settings.from_environ(
            {"GATEWAY_API_KEYS": "sk-gw", "ANTHROPIC_API_KEY": "sk-up", "ANTHROPIC_BASE_URL": url}
        )
        async with (
            running(create_app(settings), "127.0.0.1", 0) as gateway,
            aiohttp.ClientSession() as client,
        ):
            body = {"model": "claude-sonnet-4-5", "max_tokens": 8, "stream": stream, "messages": []}
            body["messages"] = [{"role": "user", "content": "hi"}]
            headers = {"x-api-key": "sk-gw", "anthropic-version": "2023-06-01"}
            async with client.post(f"{gateway.base_url}/v1/messages", json=body, headers=headers) as response:
                await response.read()
                assert response.status == 200
                ids, retries = (
                    response.headers.getall("x-client-request-id"),
                    response.headers.getall("x-gateway-retries"),
                )
    assert len(ids) == 1 and ids[0] != "spoofed"
    assert retries == ["0"]
