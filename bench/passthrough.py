"""A bare aiohttp pass-through: the floor the gateway's cost is measured against.

It does what any aiohttp reverse proxy must do and nothing else: no auth, no JSON parsing, no
logging, no metrics. ``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` are forwarded to
the upstream with the body bytes and the request headers minus hop-by-hop ones; a reply with a
``Content-Length`` is read whole and returned in one :class:`aiohttp.web.Response`, any other
(chunked SSE streams) is relayed chunk by chunk (``iter_any`` + ``write``) as it arrives.

It is set up the way the gateway is, so the comparison is fair rather than handicapped: uvloop
(:func:`bench.evloop.run`, the same ``uvloop.new_event_loop`` factory as
``gateway.process``), ``access_log=None``, one :class:`aiohttp.ClientSession` with a pooled
keep-alive :class:`aiohttp.TCPConnector` (512 connections, the gateway's default pool size), no
response decompression (bytes are relayed as they come), no ``User-Agent`` added.

Standalone: ``python -m bench passthrough --upstream http://127.0.0.1:9100 --port 9200``
(prints ``READY <port>`` once listening; SIGTERM/SIGINT stop it).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Iterable, Sequence
from typing import Final

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from bench import evloop

ROUTES: Final = ("/v1/messages", "/v1/messages/count_tokens")
POOL_SIZE: Final = 512
MAX_BODY_BYTES: Final = 32 * 1024 * 1024
# RFC 9110 section 7.6.1 connection-specific fields, plus the framing fields aiohttp sets itself
HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
UPSTREAM_KEY: Final = web.AppKey("upstream", str)
SESSION_KEY: Final = web.AppKey("session", aiohttp.ClientSession)


def end_to_end(headers: Iterable[tuple[str, str]]) -> CIMultiDict[str]:
    """``headers`` without the hop-by-hop ones (names compared case-insensitively)."""
    return CIMultiDict((k, v) for k, v in headers if k.lower() not in HOP_BY_HOP)


async def forward(request: web.Request) -> web.StreamResponse:
    session = request.app[SESSION_KEY]
    body = await request.read()
    url = request.app[UPSTREAM_KEY] + request.path_qs
    resp: web.StreamResponse | None = None
    try:
        async with session.post(url, data=body, headers=end_to_end(request.headers.items())) as up:
            headers = end_to_end(up.headers.items())
            if up.content_length is not None:
                return web.Response(status=up.status, body=await up.read(), headers=headers)
            resp = web.StreamResponse(status=up.status, headers=headers)
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp
    except aiohttp.ClientConnectionError as exc:
        if resp is not None:
            raise  # the relay had started (or the client went away): nothing to answer
        return web.json_response(
            {"type": "error", "error": {"type": "api_error", "message": f"upstream: {type(exc).__name__}"}},
            status=502,
        )


async def _open_session(app: web.Application) -> None:
    connector = aiohttp.TCPConnector(
        limit=POOL_SIZE, limit_per_host=POOL_SIZE, ssl=False, keepalive_timeout=60.0, ttl_dns_cache=60
    )
    app[SESSION_KEY] = aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None),
        auto_decompress=False,
        trust_env=False,
        skip_auto_headers=("User-Agent",),
        read_bufsize=2**16,
    )


async def _close_session(app: web.Application) -> None:
    await app[SESSION_KEY].close()


def build_app(upstream: str) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[UPSTREAM_KEY] = upstream.rstrip("/")
    for route in ROUTES:
        app.router.add_post(route, forward)
    app.on_startup.append(_open_session)
    app.on_cleanup.append(_close_session)
    return app


async def start(upstream: str, host: str = "127.0.0.1", port: int = 0) -> tuple[web.AppRunner, int]:
    """Start listening in the running loop; returns the runner (``await runner.cleanup()``) and port."""
    runner = web.AppRunner(build_app(upstream), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024, reuse_address=True)
    await site.start()
    bound: int = runner.addresses[0][1]
    return runner, bound


async def serve_forever(upstream: str, host: str, port: int) -> None:
    """Run until SIGTERM/SIGINT; print ``READY <port>`` on stdout once listening."""
    runner, bound = await start(upstream, host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"READY {bound}", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench passthrough",
        description="Run the bare aiohttp pass-through (the benchmark's floor) in the foreground.",
    )
    p.add_argument("--upstream", required=True, help="upstream base URL, e.g. http://127.0.0.1:9100")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9200, help="0 picks a free port (printed as 'READY <port>')")
    return p


def main(argv: Sequence[str]) -> int:
    a = _parser().parse_args(argv)
    evloop.run(serve_forever(a.upstream, a.host, a.port))
    return 0
