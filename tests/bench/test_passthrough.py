"""The bare aiohttp pass-through (the benchmark's floor), as a real process on loopback.

It must relay the fake upstream's replies unchanged (a stream byte for byte, as a stream), forward
the body and the end-to-end headers, and let the runner read its CPU over exactly the window it
counts requests in. No timing is asserted.
"""

from __future__ import annotations

import asyncio
import http.client
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from aiohttp import web

from bench import payloads, processes
from bench.loadgen import LoadConfig
from bench.passthrough import end_to_end
from bench.report import FLOOR
from bench.runner import measure_load
from bench.servers import Server, spawn_passthrough

DELTAS = 7


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes  # de-chunked


def _post(url: str, path: str, body: bytes, headers: dict[str, str] | None = None) -> Reply:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("POST", path, body=body, headers={"content-type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()


@pytest.fixture(scope="module")
def floor() -> Iterator[tuple[str, Server]]:
    upstream, port = processes.start_upstream(0, DELTAS)
    upstream_url = f"http://127.0.0.1:{port}"
    probe = LoadConfig(url=upstream_url, mode="nonstream", concurrency=1)
    try:
        server = spawn_passthrough(upstream_url, probe, timeout=30.0)
        try:
            yield upstream_url, server
        finally:
            server.close()
    finally:
        processes.stop(upstream)


def test_relays_stream_and_bodies_unchanged(floor: tuple[str, Server]) -> None:
    upstream_url, server = floor
    for path, body in (
        ("/v1/messages", payloads.request_body(stream=True)),
        ("/v1/messages", payloads.request_body(stream=False)),
        ("/v1/messages/count_tokens", payloads.request_body(stream=False)),
    ):
        direct = _post(upstream_url, path, body)
        relayed = _post(server.url, path, body)
        assert direct.status == relayed.status == 200
        assert relayed.body == direct.body  # byte-identical payload
        assert relayed.headers["content-type"] == direct.headers["content-type"]
        assert relayed.headers["request-id"] == direct.headers["request-id"]
    stream = _post(server.url, "/v1/messages", payloads.request_body(stream=True))
    # relayed as a stream (chunked, as it came), not buffered into one sized body
    assert stream.headers.get("transfer-encoding") == "chunked" and "content-length" not in stream.headers
    assert stream.body == b"".join(payloads.stream_events(DELTAS))
    whole = _post(server.url, "/v1/messages", payloads.request_body(stream=False))
    assert whole.headers["content-length"] == str(len(payloads.message_body()))
    assert whole.body == payloads.message_body()
    assert _post(server.url, "/v1/other", b"{}").status == 404  # only the two Messages routes


def test_cpu_window_excludes_the_warm_up(floor: tuple[str, Server]) -> None:
    _, server = floor
    cfg = LoadConfig(url=server.url, mode="stream", concurrency=2, duration=0.6, warmup=0.4)
    roles = {FLOOR: [server.proc.pid]}
    samples, shares, cpu = measure_load(cfg, 1, roles, FLOOR, None)
    assert samples.error_count == 0, samples.errors
    assert cpu.cpu_s is not None and cpu.cpu_s > 0
    assert FLOOR in shares.per_role and "loadgen" in shares.per_role
    # the warm-up's requests are in ``ends`` but not in the window (nor is their CPU)
    warm_up_done = sum(1 for t in samples.ends if t < min(samples.ends) + cfg.warmup / 2)
    assert warm_up_done > 0
    assert 0 < cpu.completed <= len(samples.ends) - warm_up_done
    assert cpu.window_s > 0 and cpu.cpu_ms_per_req == pytest.approx(cpu.cpu_s * 1e3 / cpu.completed)


async def test_forwards_body_and_end_to_end_headers_only() -> None:
    seen: list[tuple[dict[str, str], bytes]] = []

    async def echo(request: web.Request) -> web.Response:
        seen.append(({k.lower(): v for k, v in request.headers.items()}, await request.read()))
        return web.json_response({"ok": True}, headers={"x-upstream": "1", "keep-alive": "timeout=5"})

    app = web.Application()
    app.router.add_post("/v1/messages", echo)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    upstream_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    probe = LoadConfig(url=upstream_url, mode="nonstream", concurrency=1)
    try:
        server = await asyncio.to_thread(spawn_passthrough, upstream_url, probe, 30.0)
        try:
            seen.clear()  # the start-up probe's request
            body = b'{"model":"m","max_tokens":1,"messages":[]}  '  # odd bytes: forwarded as they are
            headers = {
                "x-api-key": "k",
                "anthropic-beta": "b1,b2",
                "proxy-authorization": "Basic secret",
                "te": "trailers",
            }
            reply = await asyncio.to_thread(_post, server.url, "/v1/messages?beta=true", body, headers)
        finally:
            await asyncio.to_thread(server.close)
    finally:
        await runner.cleanup()
    assert reply.status == 200 and reply.headers["x-upstream"] == "1"
    assert "keep-alive" not in reply.headers  # the upstream's hop-by-hop header stays behind
    [(got, got_body)] = seen
    assert got_body == body
    assert got["x-api-key"] == "k" and got["anthropic-beta"] == "b1,b2"
    assert got["content-type"] == "application/json"
    assert "proxy-authorization" not in got and "te" not in got
    assert got["host"] == upstream_url.removeprefix("http://")


def test_end_to_end_drops_hop_by_hop_headers_case_insensitively() -> None:
    kept = end_to_end(
        [("Connection", "close"), ("X-Api-Key", "k"), ("Transfer-Encoding", "chunked"), ("Accept", "a"),
         ("Content-Length", "3"), ("HOST", "h"), ("Keep-Alive", "5"), ("accept", "b")]
    )  # fmt: skip
    assert list(kept.items()) == [("X-Api-Key", "k"), ("Accept", "a"), ("accept", "b")]
