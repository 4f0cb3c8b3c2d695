"""OAuth (client-credentials grant) for a streamable HTTP MCP server: server-everything from npm
behind a loopback gate that speaks the MCP authorization spec: a 401 with ``WWW-Authenticate:
Bearer resource_metadata=...``, protected-resource metadata (RFC 9728), authorization-server
metadata (RFC 8414) and a token endpoint (RFC 6749 section 4.4, ``client_secret_basic``). The gate
is written from those RFCs; the OAuth client is the ``mcp`` package's."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

import loop
from loop.events import ToolFinished
from loop.mcp import connect, parse_servers
from loop.testing import FakeModel, FakeResponse, text, tool_use
from loop.transitions import Completed
from tests.loop.support import of_type, run_to_end
from tests.support.mcp_servers import everything_http

CLIENT_ID, CLIENT_SECRET, TOKEN = "switchyard-agent", "s3cret-client", "at-123"
HOP = {"host", "authorization", "content-length", "transfer-encoding", "connection"}


@dataclass
class Gate:
    upstream: str
    base: str = ""
    token_requests: list[dict[str, str]] = field(default_factory=list)
    unauthorised: int = 0
    session: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/.well-known/oauth-protected-resource/mcp", self.resource_metadata)
        app.router.add_get("/.well-known/oauth-authorization-server", self.server_metadata)
        app.router.add_post("/token", self.token)
        app.router.add_route("*", "/mcp", self.mcp)
        return app

    async def resource_metadata(self, request: web.Request) -> web.Response:
        return web.json_response({"resource": f"{self.base}/mcp", "authorization_servers": [self.base]})

    async def server_metadata(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "issuer": self.base,
                "authorization_endpoint": f"{self.base}/authorize",
                "token_endpoint": f"{self.base}/token",
                "response_types_supported": ["code"],
                "grant_types_supported": ["client_credentials"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic"],
            }
        )

    async def token(self, request: web.Request) -> web.Response:
        form = dict(await request.post())
        self.token_requests.append({k: str(v) for k, v in form.items()})
        expected = "Basic " + base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
        if form.get("grant_type") != "client_credentials" or request.headers.get("Authorization") != expected:
            return web.json_response({"error": "invalid_client"}, status=401)
        return web.json_response({"access_token": TOKEN, "token_type": "Bearer", "expires_in": 3600})

    async def mcp(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.unauthorised += 1
            challenge = f'Bearer resource_metadata="{self.base}/.well-known/oauth-protected-resource/mcp"'
            return web.Response(status=401, headers={"WWW-Authenticate": challenge})
        assert self.session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        async with self.session.request(
            request.method, self.upstream, headers=headers, data=await request.read()
        ) as upstream:
            response = web.StreamResponse(
                status=upstream.status,
                headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP},
            )
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response


@pytest.fixture
async def gate() -> AsyncIterator[Gate]:
    async with everything_http() as upstream, aiohttp.ClientSession() as session:
        gate = Gate(upstream, session=session)
        runner = web.AppRunner(gate.app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        gate.base = f"http://127.0.0.1:{port}"
        try:
            yield gate
        finally:
            await runner.cleanup()


async def test_a_client_credentials_server_gets_a_token_and_serves_tools(gate: Gate, tmp_path: Path) -> None:
    servers = parse_servers(
        {
            "mcpServers": {
                "secure": {
                    "type": "http",
                    "url": f"{gate.base}/mcp",
                    "permission": "readOnly",
                    "oauth": {"clientId": CLIENT_ID, "clientSecret": "${MCP_SECRET}", "issuer": gate.base},
                }
            }
        },
        {"MCP_SECRET": CLIENT_SECRET},
    )
    assert CLIENT_SECRET not in repr(servers["secure"])
    model = FakeModel(
        [FakeResponse.of(tool_use("mcp__secure__get-sum", {"a": 20, "b": 22})), FakeResponse.of(text("42"))]
    )
    async with connect(servers) as tools:
        assert tools.failures == [] and "mcp__secure__get-sum" in [t.name for t in tools]
        run = loop.query(loop.QueryParams("add", tools=tools, deps=loop.LoopDeps(call_model=model)))
        events = await run_to_end(run)
    assert run.terminal == Completed("end_turn")
    (finished,) = of_type(events, ToolFinished)
    assert finished.result["content"] == "The sum of 20 and 22 is 42."
    assert gate.unauthorised >= 1  # the client discovered the authorization server from the 401
    assert [r["grant_type"] for r in gate.token_requests] == ["client_credentials"]


async def test_wrong_credentials_fail_that_server_only(gate: Gate) -> None:
    servers = parse_servers(
        {
            "mcpServers": {
                "secure": {
                    "type": "http",
                    "url": f"{gate.base}/mcp",
                    "timeout": 10,
                    "oauth": {"clientId": CLIENT_ID, "clientSecret": "wrong-secret", "issuer": gate.base},
                }
            }
        },
        {},
    )
    async with connect(servers) as tools:
        assert list(tools) == [] and [f.server for f in tools.failures] == ["secure"]
        message = tools.failures[0].message
        assert "wrong-secret" not in message and "Token exchange failed (401)" in message, message
