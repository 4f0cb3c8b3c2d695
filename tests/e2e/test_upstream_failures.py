"""Gateway-made errors when the upstream cannot be reached or does not answer."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import anthropic
import pytest

from gateway.app import create_app
from gateway.config import Settings
from gateway.process import running

KEY = "sk-gw"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def _gateway(base_url: str, **env: str) -> AsyncIterator[str]:
    settings = Settings.from_environ(
        {
            "GATEWAY_API_KEYS": KEY,
            "ANTHROPIC_API_KEY": "up",
            "ANTHROPIC_BASE_URL": base_url,
            "GATEWAY_MAX_RETRIES": "0",
            **env,
        }
    )
    async with running(create_app(settings), "127.0.0.1", 0) as server:
        yield server.base_url


async def test_unreachable_upstream_is_502() -> None:
    async for url in _gateway(f"http://127.0.0.1:{_closed_port()}"):
        client = anthropic.AsyncAnthropic(api_key=KEY, base_url=url, max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as info:
            await client.messages.create(model="claude-sonnet-4-6", max_tokens=8, messages=[])
        assert info.value.status_code == 502
        assert info.value.body["error"]["type"] == "api_error"  # type: ignore[index]
        assert "unreachable" in info.value.body["error"]["message"]  # type: ignore[index]
        assert info.value.response.headers["x-client-request-id"]


async def test_silent_upstream_is_504() -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def black_hole(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # read nothing, answer nothing

    server = await asyncio.start_server(black_hole, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async for url in _gateway(f"http://127.0.0.1:{port}", GATEWAY_FIRST_BYTE_TIMEOUT_S="0.3"):
            client = anthropic.AsyncAnthropic(api_key=KEY, base_url=url, max_retries=0)
            with pytest.raises(anthropic.APIStatusError) as info:
                await client.messages.create(model="claude-sonnet-4-6", max_tokens=8, messages=[])
            assert info.value.status_code == 504
            assert info.value.body["error"]["type"] == "timeout_error"  # type: ignore[index]
            assert accepted
    finally:
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_truncated_stream_ends_with_error_event() -> None:
    """An upstream that cuts its SSE body before message_stop: the client gets an error event."""

    async def truncating(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        head = (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nrequest-id: req_t\r\n"
            b"connection: close\r\n\r\n"
        )
        start = (
            b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_t","type":"message",'
            b'"role":"assistant","model":"claude-sonnet-4-6","content":[],"stop_reason":null,'
            b'"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1}}}\n\n'
        )
        writer.write(head + start)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(truncating, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async for url in _gateway(f"http://127.0.0.1:{port}"):
            client = anthropic.AsyncAnthropic(api_key=KEY, base_url=url, max_retries=0)
            with pytest.raises(anthropic.APIStatusError) as info:
                async with client.messages.stream(
                    model="claude-sonnet-4-6", max_tokens=8, messages=[{"role": "user", "content": "x"}]
                ) as stream:
                    await stream.get_final_message()
            assert info.value.body["error"]["type"] == "api_error"  # type: ignore[index]
    finally:
        server.close()
        await server.wait_closed()
