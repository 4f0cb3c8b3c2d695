"""Starting and stopping emulators, the request log, streaming latency on the manual clock."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import anthropic
import orjson
from aiohttp import web

from emulators import (
    DEFAULT_API_KEY,
    EmulatorConfig,
    ManualClock,
    RunningEmulator,
    create_app,
    emulator_in_thread,
    get_state,
    run_emulator,
)
from tests.support.emulator_sdk import MODEL

REPO = Path(__file__).resolve().parents[2]


def test_create_app_returns_an_application() -> None:
    config = EmulatorConfig(api_keys=frozenset({"k"}))
    app = create_app(config)
    assert isinstance(app, web.Application)
    assert get_state(app).config is config and len(get_state(app).log) == 0


async def test_port_zero_binds_a_real_port() -> None:
    async with run_emulator(EmulatorConfig(), host="127.0.0.1", port=0) as first, run_emulator() as second:
        assert first.port > 0 and first.port != second.port
        assert first.base_url == f"http://127.0.0.1:{first.port}"
        with socket.create_connection(("127.0.0.1", first.port), timeout=2):
            pass


async def test_requests_are_recorded_exactly_as_received(emu: RunningEmulator) -> None:
    body = orjson.dumps({"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
    head = (
        "POST /v1/messages?beta=true HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{emu.port}\r\n"
        "X-Stainless-Retry-Count: 0\r\n"
        f"x-api-key: {DEFAULT_API_KEY}\r\n"
        "anthropic-version: 2023-06-01\r\n"
        "X-Custom: one\r\n"
        "x-custom: two\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", emu.port)
    writer.write(head.encode() + body)
    await writer.drain()
    response = await reader.read()
    writer.close()
    assert response.startswith(b"HTTP/1.1 200")
    (recorded,) = emu.requests
    assert recorded.method == "POST" and recorded.path == "/v1/messages?beta=true"
    assert recorded.path_only == "/v1/messages"
    assert recorded.body == body and recorded.json()["max_tokens"] == 8
    assert [k for k, _ in recorded.headers] == [
        "Host",
        "X-Stainless-Retry-Count",
        "x-api-key",
        "anthropic-version",
        "X-Custom",
        "x-custom",
        "Content-Type",
        "Content-Length",
        "Connection",
    ]
    assert recorded.header_values("x-custom") == ["one", "two"]
    assert recorded.timestamp == emu.clock.time()
    emu.request_log.clear()
    assert emu.requests == []


async def test_chunk_delay_uses_the_clock_not_real_time() -> None:
    clock = ManualClock()
    start = clock.time()
    config = EmulatorConfig(clock=clock, chunk_delay_s=30.0)
    async with (
        run_emulator(config) as emu,
        anthropic.AsyncAnthropic(api_key=DEFAULT_API_KEY, base_url=emu.base_url, max_retries=0) as client,
    ):
        began = time.monotonic()
        async with client.messages.stream(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "a b c d e f g h i j"}]
        ) as stream:
            await stream.get_final_message()
        assert time.monotonic() - began < 5
    assert clock.time() - start >= 60  # at least two deltas, 30 clock-seconds each


def test_emulator_in_thread_stops_on_exit() -> None:
    with (
        emulator_in_thread(EmulatorConfig()) as emu,
        anthropic.Anthropic(api_key=DEFAULT_API_KEY, base_url=emu.base_url, max_retries=0) as client,
    ):
        assert (
            client.messages.count_tokens(
                model=MODEL, messages=[{"role": "user", "content": "x"}]
            ).input_tokens
            > 0
        )
        port = emu.port
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return
    raise AssertionError("the emulator still accepts connections after exit")


async def test_serve_runs_until_sigterm() -> None:
    script = (
        "from emulators import EmulatorConfig, serve\n"
        "serve(EmulatorConfig(), '127.0.0.1', 0, on_ready=lambda e: print(e.base_url, flush=True))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "AWS_", "GOOGLE_"))}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), timeout=20)
        base_url = line.decode().strip()
        assert base_url.startswith("http://127.0.0.1:")
        async with (
            aiohttp.ClientSession() as http,
            http.get(
                base_url + "/v1/models",
                headers={"x-api-key": DEFAULT_API_KEY, "anthropic-version": "2023-06-01"},
            ) as response,
        ):
            assert response.status == 200
            assert (await response.json())["has_more"] is False
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), timeout=15) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_client_disconnect_mid_stream_is_harmless() -> None:
    config = EmulatorConfig(chunk_delay_s=0.02)  # real clock: the stream takes a while
    body = orjson.dumps(
        {
            "model": MODEL,
            "max_tokens": 64,
            "stream": True,
            "messages": [{"role": "user", "content": "a b c d e f"}],
        }
    )
    headers = {
        "x-api-key": DEFAULT_API_KEY,
        "anthropic-version": "2023-06-01",
        "content-type": "application/json",
    }
    async with run_emulator(config) as emu, aiohttp.ClientSession() as http:
        async with http.post(emu.base_url + "/v1/messages", data=body, headers=headers) as response:
            first = await response.content.readline()
            assert first == b"event: message_start\n"
            response.close()  # drop the connection mid-stream
        await asyncio.sleep(0.1)
        async with http.post(emu.base_url + "/v1/messages", data=body, headers=headers) as response:
            assert response.status == 200
            assert (await response.read()).endswith(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
