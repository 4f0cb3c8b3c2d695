"""A request leaves no reference cycles behind: everything it allocated is freed by reference
counting when it ends, not kept (chunks, buffers, the aiohttp request and response) until the
cyclic collector runs.

The gateway raises the collector's youngest-generation threshold (``gateway.process.settle_heap``),
so garbage held by a cycle lingers for thousands of allocations: each streamed request used to
leave its whole object graph in one (the relay held its write-stall watch, which held the relay's
bound method). Measured with the collector off and ``DEBUG_SAVEALL``: whatever ``gc.collect()``
then finds unreachable is what a cycle kept alive.
"""

from __future__ import annotations

import asyncio
import gc
from collections import Counter
from collections.abc import Coroutine, Iterator
from typing import Any

import aiohttp
import pytest

from emulators import DEFAULT_API_KEY, emulator_in_thread
from gateway.app import create_app
from gateway.config import Settings
from gateway.process import running
from tests.support.threaded import LoopThread

KEY = "sk-gw-cycles-41c7"
BODY = {"model": "claude-sonnet-4-6", "max_tokens": 64, "messages": [{"role": "user", "content": "Hello"}]}
SESSION = {"x-claude-code-session-id": "cycles-session-1"}

# (path, body, extra headers, api key, expected status)
KINDS: list[tuple[str, object, dict[str, str], str, int]] = [
    ("/v1/messages", BODY, {}, KEY, 200),
    ("/v1/messages", {**BODY, "stream": True}, {}, KEY, 200),
    (
        "/v1/messages",
        {
            **BODY,
            "stream": True,
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        },
        SESSION,
        KEY,
        200,
    ),
    ("/v1/messages/count_tokens", {k: v for k, v in BODY.items() if k != "max_tokens"}, {}, KEY, 200),
    ("/v1/messages", BODY, {}, "sk-wrong", 401),
    ("/v1/messages", b'{"model": ', {}, KEY, 400),
    ("/v1/messages", {**BODY, "model": "no-such-model"}, {}, KEY, 404),
]


class Stack:
    def __init__(self, thread: LoopThread, base_url: str) -> None:
        self.thread = thread
        self.base_url = base_url

    def call(self, path: str, body: object, headers: dict[str, str], key: str) -> int:
        async def go() -> int:
            async with aiohttp.ClientSession() as session:
                data = body if isinstance(body, bytes) else None
                async with session.post(
                    self.base_url + path,
                    data=data,
                    json=None if data is not None else body,
                    headers={"x-api-key": key, "anthropic-version": "2023-06-01", **headers},
                ) as response:
                    await response.read()
                    return response.status

        return self.thread.run(go())


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with emulator_in_thread() as emulator:
        thread = LoopThread()
        try:
            environ = {
                "GATEWAY_API_KEYS": KEY,
                "ANTHROPIC_API_KEY": DEFAULT_API_KEY,
                "ANTHROPIC_BASE_URL": emulator.base_url,
                "GATEWAY_MAX_RETRIES": "0",
            }
            gateway = thread.enter(running(create_app(Settings.from_environ(environ)), "127.0.0.1", 0))
            yield Stack(thread, gateway.base_url)
        finally:
            thread.close()


def test_no_request_kind_leaves_cyclic_garbage(stack: Stack) -> None:
    for path, body, headers, key, status in KINDS:  # warm-up: caches, pools, lazy imports
        assert stack.call(path, body, headers, key) == status, path
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(3):
            for path, body, headers, key, status in KINDS:
                assert stack.call(path, body, headers, key) == status, path
        gc.collect()
        kept = Counter(
            f"{type(o).__module__}.{type(o).__qualname__}"
            for o in gc.garbage
            if type(o).__module__.startswith(("gateway.", "aiohttp."))
            and "emulator" not in type(o).__module__
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert not kept, f"objects only a reference cycle freed: {dict(kept)}"


def test_no_request_kind_leaves_an_async_generator_to_the_loop(stack: Stack) -> None:
    """An async generator abandoned before its end is closed by the event loop in a task of its
    own (``aclose`` through the loop's finalizer hook): a task per request for nothing. Every
    generator on the request path runs to its end or is closed where it is used."""
    loop = stack.thread.loop
    created: Counter[str] = Counter()

    def factory(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kwargs: Any
    ) -> asyncio.Future[Any]:
        created[type(coro).__name__] += 1
        return asyncio.Task(coro, loop=loop, **kwargs)

    stack.thread.run(_set_factory(loop, factory))
    try:
        for _ in range(3):
            for path, body, headers, key, status in KINDS:
                assert stack.call(path, body, headers, key) == status, path
        gc.collect()  # a generator only a cycle held is finalized here
        stack.thread.run(asyncio.sleep(0.05))  # the finalizer's tasks run
    finally:
        stack.thread.run(_set_factory(loop, None))
    assert created["coroutine"] > 0, created  # the factory saw the handlers' tasks
    assert created["async_generator_athrow"] == 0, dict(created)


async def _set_factory(loop: asyncio.AbstractEventLoop, factory: Any) -> None:
    loop.set_task_factory(factory)
