"""A scripted raw-TCP upstream and a gateway in front of it, for answers no HTTP library would send.

``ScriptedUpstream.answer(request)`` returns the bytes to write for one request (status line,
headers, body), written as they are, then the connection is closed (a list: its pieces written
50 ms apart); every request's head and body are kept in ``requests``. ``scripted_gateway`` serves a gateway (first party by default) in front
of it; ``post`` sends one Messages request and returns status, headers and the raw body.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from multidict import CIMultiDict

from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import RunningServer, running
from tests.support.local_app import serving_raw

CLIENT_KEY = "sk-gw-scripted"
UPSTREAM_KEY = "sk-ant-upstream-7f3a9c2e51b4d8"


@dataclass(frozen=True, slots=True)
class Seen:
    head: bytes
    body: bytes

    def header(self, name: str) -> str | None:
        for line in self.head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == name.encode():
                return value.strip().decode("latin-1")
        return None


@dataclass
class ScriptedUpstream:
    answer: Callable[[Seen], bytes | list[bytes]] = lambda seen: b""
    requests: list[Seen] = field(default_factory=list)
    url: str = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            seen = Seen(head, b"")
            length = int(seen.header("content-length") or 0)
            seen = Seen(head, await reader.readexactly(length))
            self.requests.append(seen)
            answer = self.answer(seen)
            for index, piece in enumerate([answer] if isinstance(answer, bytes) else answer):
                if index:
                    await asyncio.sleep(0.05)
                writer.write(piece)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def http_answer(
    status: int, body: bytes, headers: Mapping[str, str] | None = None, reason: str = "X"
) -> bytes:
    """One whole HTTP/1.1 answer, framed by ``Content-Length``, ``connection: close``."""
    lines = [f"HTTP/1.1 {status} {reason}", f"content-length: {len(body)}", "connection: close"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@contextlib.asynccontextmanager
async def scripted_gateway(
    upstream: ScriptedUpstream, env: Mapping[str, str] | None = None
) -> AsyncIterator[tuple[RunningServer, GatewayMetrics]]:
    """A gateway whose upstream is ``upstream``: first party unless ``env`` says otherwise (a value
    ``{upstream}`` in it is replaced by the upstream's URL, e.g. for ``ANTHROPIC_BEDROCK_BASE_URL``)."""
    async with serving_raw(upstream.handle) as upstream.url:
        settings = Settings.from_environ(
            {
                "GATEWAY_API_KEYS": CLIENT_KEY,
                "GATEWAY_MAX_RETRIES": "0",
                "ANTHROPIC_API_KEY": UPSTREAM_KEY,
                "ANTHROPIC_BASE_URL": upstream.url,
                **{key: upstream.url if v == "{upstream}" else v for key, v in (env or {}).items()},
            }
        )
        metrics = GatewayMetrics()
        async with running(create_app(settings, metrics=metrics), "127.0.0.1", 0) as server:
            yield server, metrics


async def post(
    server: RunningServer,
    *,
    stream: bool = False,
    headers: Mapping[str, str] | None = None,
    path: str = "/v1/messages",
) -> tuple[int, CIMultiDict[str], bytes]:
    """One request to the gateway (``path``: ``/v1/messages``, ``/v1/messages/count_tokens``, or
    ``GET /v1/models``), as the client's key."""
    body: dict[str, Any] = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}
    if path == "/v1/messages":
        body.update(max_tokens=16, stream=stream)
    method = "GET" if path == "/v1/models" else "POST"
    async with (
        aiohttp.ClientSession() as client,
        client.request(
            method,
            f"{server.base_url}{path}",
            data=None if method == "GET" else orjson.dumps(body),
            headers={"x-api-key": CLIENT_KEY, "content-type": "application/json", **(headers or {})},
        ) as response,
    ):
        return response.status, CIMultiDict(response.headers), await response.read()
