"""The log writer: batched off the request path, bounded when stderr blocks, flushed at exit."""

from __future__ import annotations

import asyncio
import fcntl
import io
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest

from gateway.line_writer import LineWriter, fd_sink
from gateway.logging_setup import install_writer, stderr_sink
from tests.observability.rig import KEY, SONNET, gateway_rig

JSON = "application/json"
LINE = orjson.dumps({"event": "request", "pad": "x" * 90}, option=orjson.OPT_APPEND_NEWLINE)  # 116 bytes


class BlockedSink:
    """A sink that blocks until released, like a stderr pipe nobody reads."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.batches: list[bytes] = []

    def __call__(self, data: bytes) -> None:
        self.entered.set()
        self.release.wait(30)
        self.batches.append(data)


def test_a_batch_is_one_write_not_one_per_line() -> None:
    batches: list[bytes] = []
    writer = LineWriter(batches.append, interval_s=3600)  # only a flush or a full buffer writes
    for _ in range(1000):
        writer.write(LINE)
    assert batches == []  # the writer thread waits for the batch to fill
    assert writer.flush(5)
    assert batches == [LINE * 1000]
    assert writer.close(5)


def test_steady_lines_are_written_once_per_interval_not_per_line() -> None:
    batches: list[bytes] = []
    writer = LineWriter(batches.append, interval_s=0.1)
    writer.write(LINE)  # the writer starts on the first line
    deadline = time.monotonic() + 0.5
    count = 1
    while time.monotonic() < deadline:  # a line every millisecond or so: hundreds of lines
        writer.write(LINE)
        count += 1
        time.sleep(0.001)
    assert writer.close(5)
    assert b"".join(batches) == LINE * count
    assert count >= 100 and len(batches) <= 10, (count, len(batches))  # ~5 intervals, not 1 per line


def test_a_blocked_sink_bounds_memory_drops_and_counts_and_recovers() -> None:
    sink = BlockedSink()
    limit = 20 * len(LINE)
    writer = LineWriter(sink, limit_bytes=limit, interval_s=0.001)
    writer.write(LINE)
    assert sink.entered.wait(5)  # the first batch is stuck in the sink
    started = time.perf_counter()
    for _ in range(5000):
        writer.write(LINE)
    spent = time.perf_counter() - started
    assert spent < 2.0, f"writes waited for the blocked sink ({spent:.2f} s)"  # ~0.01 s unblocked
    assert writer.dropped == 5000 - 19  # 1 stuck + 19 buffered: 20 lines fill the limit
    assert writer.held_bytes <= limit + 300  # plus the one "dropping" notice
    sink.release.set()
    assert writer.flush(5)
    writer.write(LINE)  # after the drop episode ended
    assert writer.close(5)
    lines = b"".join(sink.batches).splitlines(keepends=True)
    requests = [line for line in lines if line == LINE]
    notices = [orjson.loads(line) for line in lines if line != LINE]
    assert len(requests) == 5002 - writer.dropped  # 1 + 5000 + 1 written
    assert [(n["level"], n["logger"]) for n in notices] == [("WARNING", "switchyard.log")] * 2
    assert "dropping lines" in notices[0]["message"]
    assert notices[1]["message"] == f"log output caught up: {writer.dropped} lines were dropped"
    assert lines.index(orjson.dumps(notices[0], option=orjson.OPT_APPEND_NEWLINE)) == 20  # in order


def test_close_flushes_and_later_lines_are_counted_not_kept() -> None:
    batches: list[bytes] = []
    writer = LineWriter(batches.append, interval_s=3600)
    writer.write(LINE)
    writer.write(LINE)
    assert writer.close(5)
    assert batches == [LINE * 2]
    writer.write(LINE)
    assert writer.dropped == 1 and batches == [LINE * 2]


def test_flush_gives_up_after_its_timeout_when_the_sink_blocks() -> None:
    sink = BlockedSink()
    writer = LineWriter(sink, interval_s=0.001)
    writer.write(LINE)
    started = time.perf_counter()
    assert writer.flush(0.2) is False
    assert time.perf_counter() - started < 2
    sink.release.set()
    assert writer.close(5)


def test_a_failing_sink_counts_its_lines_as_dropped() -> None:
    def broken(data: bytes) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    writer = LineWriter(broken, interval_s=0.001)
    for _ in range(3):
        writer.write(LINE)
    assert writer.flush(5)
    assert writer.dropped == 3
    assert writer.close(5)


@pytest.fixture
def unread_pipe() -> Iterator[tuple[int, int]]:
    """A pipe of one page whose reading end nobody reads (until the test drains it)."""
    read_fd, write_fd = os.pipe()
    try:
        fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, 4096)
    except (AttributeError, OSError):
        pytest.skip("cannot shrink a pipe here (F_SETPIPE_SZ is Linux only)")
    try:
        yield read_fd, write_fd
    finally:
        os.close(read_fd)
        os.close(write_fd)


async def test_a_stderr_nobody_reads_never_blocks_the_gateway(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, unread_pipe: tuple[int, int]
) -> None:
    """60 concurrent requests while the log pipe is full: all answered, lines dropped and counted
    (in ``gateway_log_lines_dropped_total``), what was kept written whole once the pipe drains."""
    caplog.set_level(logging.INFO, logger="switchyard.access")
    read_fd, write_fd = unread_pipe
    limit = 16 * 1024
    writer = LineWriter(fd_sink(write_fd), limit_bytes=limit, interval_s=0.005)
    previous = install_writer(writer)
    requests = 60
    body = orjson.dumps({"model": SONNET, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
    try:
        async with gateway_rig(tmp_path) as rig, aiohttp.ClientSession() as session:

            async def ask() -> int:
                url = rig.base_url + "/v1/messages"
                headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "content-type": JSON}
                async with session.post(url, data=body, headers=headers) as answer:
                    await answer.read()
                    return answer.status

            statuses = await asyncio.wait_for(asyncio.gather(*(ask() for _ in range(requests))), 30)
            assert statuses == [200] * requests
            labels = {"provider": "anthropic", "model": SONNET, "stream": "false", "status_class": "2xx"}
            for _ in range(500):  # a scope closes (sample, then line) just after its answer went out
                if rig.value("gateway_requests_total", **labels) == requests:
                    break
                await asyncio.sleep(0.01)
            exposition = rig.metrics.exposition().decode()
        assert writer.held_bytes <= limit + 1024
        dropped = writer.dropped
        assert dropped > 0
        assert f"gateway_log_lines_dropped_total {float(dropped)}" in exposition
    finally:
        install_writer(previous)
        chunks: list[bytes] = []
        reader = threading.Thread(target=_read_all, args=(read_fd, chunks))
        reader.start()
        closed = writer.close(10)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, write_fd)  # the pipe's last writing end closes: the reader sees its end
        os.close(devnull)
        reader.join(10)
    assert closed
    records = [orjson.loads(line) for line in b"".join(chunks).splitlines()]  # every line whole
    access = [r for r in records if r["logger"] == "switchyard.access"]
    notices = [r for r in records if r["logger"] == "switchyard.log"]
    assert len(access) + writer.dropped == requests
    assert len(notices) == 2 and notices[-1]["message"].endswith(f"{dropped} lines were dropped")


def _read_all(fd: int, chunks: list[bytes]) -> None:
    while data := os.read(fd, 65536):
        chunks.append(data)


def test_fd_sink_waits_on_a_non_blocking_pipe_instead_of_losing_lines() -> None:
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)  # as another process sharing the pipe might have set it
    chunks: list[bytes] = []
    reader = threading.Thread(target=_read_all, args=(read_fd, chunks))
    reader.start()
    data = LINE * 20_000  # 2.3 MB: far more than the pipe holds
    try:
        fd_sink(write_fd)(data)
    finally:
        os.close(write_fd)
        reader.join(10)
        os.close(read_fd)
    assert b"".join(chunks) == data


def test_stderr_without_a_descriptor_gets_the_text(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    stderr_sink()(LINE)
    assert stream.getvalue() == LINE.decode()


FLUSH_AT_EXIT = """
import logging
from gateway.logging_setup import configure_logging, log_writer
configure_logging("INFO")
log_writer().interval_s = 3600  # nothing is written before the exit flush
for i in range(500):
    logging.getLogger("switchyard.test").info("line %d", i)
"""


def test_lines_are_flushed_at_exit() -> None:
    result = subprocess.run(
        [sys.executable, "-c", FLUSH_AT_EXIT],
        capture_output=True,
        timeout=60,
        check=True,
    )
    lines = [orjson.loads(line) for line in result.stderr.splitlines()]
    assert [line["message"] for line in lines] == [f"line {i}" for i in range(500)]
    assert {(line["level"], line["logger"]) for line in lines} == {("INFO", "switchyard.test")}
