"""The upstream connections' protocol: aiohttp's own, without a resume call per chunk read.

aiohttp 3.14's ``StreamReader`` asks the connection to resume reading after every chunk it hands
out, paused or not (a 50-delta stream: ~55 calls, ~13 % of the gateway's instructions per stream).
``ResponseHandler`` skips the call unless reading is paused, as aiohttp did up to 3.13; pausing
and resuming are otherwise aiohttp's. ``use_response_handler`` makes a connector create it.

Details: docs/internals/gateway.md
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

import aiohttp
from aiohttp.client_proto import ResponseHandler as _AiohttpResponseHandler


class ResponseHandler(_AiohttpResponseHandler):
    """aiohttp's client protocol; ``resume_reading`` does nothing unless reading is paused."""

    def resume_reading(self, resume_parser: bool = True) -> None:
        if self._reading_paused:
            super().resume_reading(resume_parser)


def use_response_handler(connector: aiohttp.TCPConnector, loop: asyncio.AbstractEventLoop) -> bool:
    """Make ``connector`` open its connections (plain, TLS, through a proxy) with
    :class:`ResponseHandler`; False (the connector left as it is) if this aiohttp has no
    protocol factory to replace."""
    factory = getattr(connector, "_factory", None)
    if not isinstance(factory, functools.partial) or factory.func is not _AiohttpResponseHandler:
        return False
    make: Callable[..., _AiohttpResponseHandler] = ResponseHandler
    connector._factory = functools.partial(make, loop=loop)
    return True
