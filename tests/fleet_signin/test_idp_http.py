"""``gateway.fleet.idp_http`` against real loopback sockets: a silent IdP, a silent proxy and an
unreachable proxy end in a named ``IdpError`` within the bound (never a hang or a traceback), and
the proxy's password is in no message."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest

from gateway.config import Settings
from gateway.egress import EgressKind
from gateway.fleet.idp_http import IdpError, IdpHttp
from tests.support.serve_process import free_port

PASSWORD = "proxy-pass-4f1d"


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[int]:
    """Accepts connections and reads, never answers."""

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass
        writer.close()

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


@contextlib.asynccontextmanager
async def answering(body: bytes) -> AsyncIterator[int]:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


def http_client(total_s: float = 0.5, **env: str) -> IdpHttp:
    return IdpHttp(Settings.from_environ({"GATEWAY_API_KEYS": "k", **env}).egress, total_s=total_s)


async def failure(client: IdpHttp, url: str) -> IdpError:
    started = time.monotonic()
    try:
        with pytest.raises(IdpError) as raised:
            await client.request("GET", url)
    finally:
        await client.close()
    assert time.monotonic() - started < 5.0  # bounded by total_s (0.5 s), generous for a loaded machine
    assert PASSWORD not in str(raised.value)
    return raised.value


async def test_a_silent_idp_times_out() -> None:
    async with silent_server() as port:
        error = await failure(http_client(), f"http://127.0.0.1:{port}/.well-known/openid-configuration")
    assert error.egress is not None and error.egress.kind is EgressKind.TIMEOUT
    assert str(error) == f"127.0.0.1:{port} did not answer within 0.5s"


async def test_a_silent_proxy_times_out() -> None:
    async with silent_server() as port:
        proxy = f"http://corp:{PASSWORD}@127.0.0.1:{port}"
        error = await failure(http_client(HTTPS_PROXY=proxy), "https://idp.example:443/jwks")
    assert error.egress is not None and error.egress.kind is EgressKind.TIMEOUT


async def test_an_unreachable_proxy_is_named_without_its_password() -> None:
    port = free_port()  # nothing listens there
    proxy = f"http://corp:{PASSWORD}@127.0.0.1:{port}"
    error = await failure(
        http_client(HTTPS_PROXY=proxy), "https://idp.example/.well-known/openid-configuration"
    )
    assert error.egress is not None and error.egress.kind is EgressKind.PROXY_UNREACHABLE
    assert str(error) == f"proxy unreachable: egress proxy 127.0.0.1:{port}: connection refused"


async def test_an_answer_that_is_not_json_is_not_an_egress_failure() -> None:
    async with answering(b"<html>login</html>") as port:
        error = await failure(http_client(), f"http://127.0.0.1:{port}/jwks")
    assert error.egress is None and "without a JSON body" in str(error)
