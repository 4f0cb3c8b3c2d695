"""No cookie state across requests on the gateway's shared outbound sessions.

One pooled session serves every tenant. With aiohttp's default cookie jar, a ``Set-Cookie`` on one
tenant's answer (a CDN's bot-management or a load balancer's affinity cookie, say) would be stored
and sent upstream with every later request, whoever makes it. The upstreams here are real aiohttp
servers on loopback, reached as ``localhost``: a host name, whose cookies the default jar does keep
(it refuses those of IP addresses, which would hide the fault).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from gateway.app import create_app
from gateway.config import Settings
from gateway.fleet.idp_http import IdpHttp
from gateway.metrics import GatewayMetrics
from gateway.process import running
from tests.support.local_app import serving

ANSWER = {
    "id": "msg_cookie",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 1},
}


@pytest.fixture
async def cookie_setter() -> AsyncIterator[tuple[str, list[str | None]]]:
    """Answers every request and sets a cookie on it; records the ``Cookie`` header each request
    carried. Yields the base URL (``localhost``) and the record."""
    seen: list[str | None] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.headers.get("cookie"))
        response = web.json_response(ANSWER)
        response.set_cookie("__cf_bm", f"visitor-{len(seen)}", httponly=True)
        return response

    app = web.Application()
    app.router.add_post("/v1/messages", answer)
    app.router.add_post("/token", answer)
    async with serving(app) as base_url:
        yield base_url.replace("127.0.0.1", "localhost"), seen


async def test_a_cookie_from_one_tenants_answer_never_goes_upstream_again(
    cookie_setter: tuple[str, list[str | None]], tmp_path: Path
) -> None:
    base_url, seen = cookie_setter
    keys = tmp_path / "keys"
    keys.write_text("sk-team-a team-a\nsk-team-b team-b\n", encoding="utf-8")
    settings = Settings.from_environ(
        {
            "GATEWAY_API_KEYS_FILE": str(keys),
            "ANTHROPIC_API_KEY": "sk-upstream",
            "ANTHROPIC_BASE_URL": base_url,
        }
    )
    body = {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    async with (
        running(create_app(settings, metrics=GatewayMetrics()), "127.0.0.1", 0) as server,
        aiohttp.ClientSession() as client,
    ):
        for key in ("sk-team-a", "sk-team-b", "sk-team-a"):
            async with client.post(
                f"{server.base_url}/v1/messages",
                json=body,
                headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
            ) as response:
                assert response.status == 200, await response.text()
                assert "set-cookie" not in response.headers  # nor is it relayed to the client
                assert (await response.json())["id"] == "msg_cookie"
    assert seen == [None, None, None]


async def test_the_idp_client_keeps_no_cookie_between_sign_ins(
    cookie_setter: tuple[str, list[str | None]],
) -> None:
    base_url, seen = cookie_setter
    idp = IdpHttp(Settings.from_environ({}).egress)
    try:
        for _ in range(2):
            status, _ = await idp.request("POST", f"{base_url}/token", form={"grant_type": "x"})
            assert status == 200
    finally:
        await idp.close()
    assert seen == [None, None]
