"""The virtual-time loop of the fault-matrix tests (``tests.support.virtual_time``): timers fire
when everything waits on time, and a frozen process does not move the clock."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from tests.support.virtual_time import VirtualTimeLoop, unsent_bytes

T = TypeVar("T")


def run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main())


def test_a_long_sleep_costs_no_real_time() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        before = loop.time()
        await asyncio.sleep(30)
        return loop.time() - before

    started = time.monotonic()
    # exactly the sleep, up to float rounding: (t + 30) - t need not be 30.0 for every clock value t
    assert run(main) == pytest.approx(30, abs=1e-9)
    assert time.monotonic() - started < 5


def test_a_timer_fires_at_its_deadline_never_before() -> None:
    """The jump lands on the timer's own deadline, so the callback never reads a clock short of it.
    ``now + (when - now)`` can round below ``when`` once the wait is longer than the clock's value
    (a freshly booted machine's monotonic clock, a long timeout): from a clock of 1 ms, each wait
    here is three times the clock."""

    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        early: list[float] = []
        for _ in range(12):
            deadline = loop.time() * 4 + 1 / 3
            fired = loop.create_future()
            loop.call_at(deadline, fired.set_result, None)
            await fired
            early.append(deadline - loop.time())
        return early

    with asyncio.Runner(loop_factory=lambda: VirtualTimeLoop(start=0.001)) as runner:
        assert max(runner.run(main())) <= 0


def test_a_frozen_process_does_not_trip_a_timeout() -> None:
    """A loopback answer delayed by a 0.3 s freeze (a garbage collection, say) still beats a
    0.1 s timeout: no time passes while the loop is busy or bytes are on their way."""

    async def main() -> bytes:
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readline()
            time.sleep(0.3)  # noqa: ASYNC251 - on purpose: the whole process stops, timers included
            writer.write(b"pong\n")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"ping\n")
            async with asyncio.timeout(0.1):
                line = await reader.readline()
            writer.close()
            return line

    assert run(main) == b"pong\n"


def test_time_stands_still_while_an_executor_job_runs() -> None:
    async def main() -> tuple[str, float]:
        loop = asyncio.get_running_loop()
        before = loop.time()

        def slow() -> str:
            time.sleep(0.2)
            return "done"

        async with asyncio.timeout(0.05):
            result = await loop.run_in_executor(None, slow)
        return result, loop.time() - before

    result, elapsed = run(main)
    assert result == "done" and elapsed < 0.05


def test_a_stall_still_trips_its_timeout() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        before = loop.time()
        try:
            async with asyncio.timeout(0.3):
                await asyncio.Event().wait()  # nobody will ever set it
        except TimeoutError:
            return loop.time() - before
        raise AssertionError("the timeout did not fire")

    assert abs(run(main) - 0.3) < 1e-6  # to asyncio's clock resolution, not a real-time margin


def test_unsent_bytes_counts_what_the_peer_has_not_taken() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    with listener, socket.create_connection(listener.getsockname()) as sender:
        receiver, _ = listener.accept()
        with receiver:
            assert unsent_bytes(sender.fileno()) == 0
            receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sender.setblocking(False)
            try:
                while True:  # fill the receiver's buffer: the rest waits in the sender's queue
                    sender.send(b"x" * 65536)
            except BlockingIOError:
                pass
            assert unsent_bytes(sender.fileno()) > 0
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"x")
        assert unsent_bytes(write_end) == 0  # not a socket: nothing in flight to wait for
    finally:
        os.close(read_end)
        os.close(write_end)


def test_time_stands_still_while_a_connect_is_under_way() -> None:
    """A handshake the kernel has not finished (here: the listener's accept queue is full, so the
    SYN is dropped and sent again about a second later) is work in flight, not waiting on time."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    address = listener.getsockname()
    queued = [socket.create_connection(address)]  # fills the accept queue
    # a thread the loop does not know about frees the queue after a while
    freeing = threading.Timer(0.2, lambda: queued.append(listener.accept()[0]))

    async def main() -> float:
        loop = asyncio.get_running_loop()
        before = loop.time()
        freeing.start()
        async with asyncio.timeout(0.1):
            _, writer = await asyncio.open_connection(*address)
        writer.close()
        return loop.time() - before

    try:
        assert run(main) < 0.1
    finally:
        freeing.join()
        for sock in [*queued, listener]:
            sock.close()
