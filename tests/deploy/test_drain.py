"""Graceful shutdown of a real `python -m gateway serve` process in front of a real emulator process.

On SIGTERM: /readyz turns 503 at once, then the listener stops accepting connections, in-flight
requests and streams run to completion, and the process exits 0; streams still open at the drain
deadline end with a well-formed SSE error event instead of a cut connection.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from gateway.config import ConfigError, Settings
from gateway.drain import SHUTDOWN_MESSAGE, Drain

UPSTREAM_KEY = "sk-upstream-drain"
CLIENT_KEY = "sk-client-drain"
HOST = "127.0.0.1"
# the emulator's "hi" stream: message_start, ping, content_block_start, content_block_delta,
# content_block_stop, message_delta, message_stop; stall_after=4 stalls right after the content
STALL_AFTER_CONTENT = 4
STALL_BEFORE_CONTENT = 1


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port


@contextmanager
def _process(
    args: list[str], env: dict[str, str], module: str = "gateway"
) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        if process.stderr is not None:
            process.stderr.close()


def _get(port: int, path: str, timeout: float = 2.0) -> int:
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def _wait_listening(port: int, path: str, deadline_s: float = 20.0) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            _get(port, path)
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {port}")


def _refuses(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return False
    except ConnectionRefusedError:
        return True


@dataclass
class Exchange:
    """One POST /v1/messages read incrementally on its own thread."""

    port: int
    fault: str
    stream: bool = True
    status: int | None = None
    content_type: str = ""
    events: list[tuple[str, dict[str, object]]] = field(default_factory=list)
    body: bytes = b""
    error: BaseException | None = None
    content_seen: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Exchange:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        conn = http.client.HTTPConnection(HOST, self.port, timeout=60)
        try:
            body = {
                "model": "claude-sonnet-4-6",
                "max_tokens": 64,
                "stream": self.stream,
                "messages": [{"role": "user", "content": "hi"}],
            }
            conn.request(
                "POST",
                "/v1/messages",
                body=json.dumps(body),
                headers={
                    "x-api-key": CLIENT_KEY,
                    "anthropic-version": "2023-06-01",
                    "content-type": "application/json",
                    "x-emulator-fault": self.fault,
                },
            )
            response = conn.getresponse()
            self.status = response.status
            self.content_type = response.getheader("content-type", "")
            if not self.content_type.startswith("text/event-stream"):
                self.body = response.read()
                return
            self._read_events(response)
        except BaseException as exc:  # the assertion names it
            self.error = exc
        finally:
            conn.close()
            self.done.set()

    def _read_events(self, response: http.client.HTTPResponse) -> None:
        """Parse SSE strictly: every event is `event:` + one `data:` JSON line + a blank line."""
        name: str | None = None
        data: dict[str, object] | None = None
        while True:
            line = response.readline()  # raises IncompleteRead if the chunked body is cut
            if not line:
                assert name is None and data is None, "body ended inside an event"
                return
            text = line.decode().rstrip("\n")
            if text.startswith("event: "):
                name = text.removeprefix("event: ")
            elif text.startswith("data: "):
                data = json.loads(text.removeprefix("data: "))
            elif text == "":
                assert name is not None and data is not None, f"incomplete event: {name} {data}"
                assert data["type"] == name
                self.events.append((name, data))
                if name == "content_block_delta":
                    self.content_seen.set()
                name, data = None, None
            else:
                raise AssertionError(f"not an SSE line: {text!r}")

    def wait(self, timeout: float) -> Exchange:
        assert self.done.wait(timeout), "exchange did not finish"
        assert self.error is None, f"exchange failed: {self.error!r}"
        return self

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.events]


@contextmanager
def _stack(**gateway_env: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    emu_port, gw_port = _free_port(), _free_port()
    with (
        _process(["--port", str(emu_port), "--api-key", UPSTREAM_KEY], {}, module="emulators"),
        _process(
            ["serve"],
            {
                "GATEWAY_PORT": str(gw_port),
                "GATEWAY_API_KEYS": CLIENT_KEY,
                "ANTHROPIC_API_KEY": UPSTREAM_KEY,
                "ANTHROPIC_BASE_URL": f"http://{HOST}:{emu_port}",
                "GATEWAY_MAX_RETRIES": "0",
                **gateway_env,
            },
        ) as gateway,
    ):
        _wait_listening(emu_port, "/v1/models")
        _wait_listening(gw_port, "/healthz")
        assert _get(gw_port, "/readyz") == 200
        yield gw_port, gateway


def _exit_code(gateway: subprocess.Popen[bytes], timeout: float) -> tuple[int, str]:
    code = gateway.wait(timeout)
    log = gateway.stderr.read().decode() if gateway.stderr else ""
    return code, log


def test_sigterm_fails_readiness_then_closes_listener_and_lets_streams_finish() -> None:
    with _stack(GATEWAY_DRAIN_DELAY_S="1.5", GATEWAY_DRAIN_TIMEOUT_S="30") as (port, gateway):
        stream = Exchange(port, f"stall_after={STALL_AFTER_CONTENT}:3").start()
        buffered = Exchange(port, "stall_headers=2.5", stream=False).start()
        idle = http.client.HTTPConnection(HOST, port, timeout=5)  # an idle keep-alive connection
        idle.request("GET", "/healthz")
        assert idle.getresponse().read() == b'{"status": "ok"}'
        assert stream.content_seen.wait(10), "no content before the stall"
        time.sleep(0.2)  # the non-streaming request is in flight (its upstream stalls 2.5 s)

        signalled = time.monotonic()
        gateway.send_signal(signal.SIGTERM)
        # 1. readiness fails at once, while the listener still accepts (GATEWAY_DRAIN_DELAY_S)
        statuses = []
        while time.monotonic() - signalled < 1.0:
            statuses.append(_get(port, "/readyz"))
            if statuses[-1] == 503:
                break
            time.sleep(0.02)
        assert statuses[-1] == 503, statuses
        assert set(statuses) <= {200, 503}
        # 2. then the listener closes: new connections are refused, idle ones are closed
        while not _refuses(port):
            assert time.monotonic() - signalled < 5, "listener still accepting"
            time.sleep(0.05)
        closed_at = time.monotonic() - signalled
        assert 1.4 <= closed_at < 3.0, closed_at
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            idle.request("GET", "/healthz")
            idle.getresponse()
        idle.close()
        assert not stream.done.is_set(), "the stream should still be stalled upstream"

        # 3. in-flight work completes, then the process exits 0 (long before the 30 s deadline)
        stream.wait(15)
        buffered.wait(15)
        code, log = _exit_code(gateway, 15)
        elapsed = time.monotonic() - signalled

    assert code == 0, log
    assert stream.status == 200
    assert stream.names[-1] == "message_stop", stream.names
    assert "error" not in stream.names
    assert buffered.status == 200 and json.loads(buffered.body)["stop_reason"] == "end_turn"
    assert elapsed < 10, elapsed
    assert "draining" in log and "deadline reached" not in log


def test_drain_deadline_ends_open_streams_well_formed_and_exits_zero() -> None:
    with _stack(GATEWAY_DRAIN_TIMEOUT_S="1.5") as (port, gateway):
        after_content = Exchange(port, f"stall_after={STALL_AFTER_CONTENT}:60").start()
        before_content = Exchange(port, f"stall_after={STALL_BEFORE_CONTENT}:60").start()
        assert after_content.content_seen.wait(10)
        time.sleep(0.3)  # the second stream's upstream has sent message_start and stalls

        signalled = time.monotonic()
        gateway.send_signal(signal.SIGTERM)
        while not _refuses(port):  # no drain delay: the listener closes at once
            assert time.monotonic() - signalled < 1.0, "listener still accepting"
            time.sleep(0.02)
        assert not after_content.done.is_set()

        after_content.wait(10)
        before_content.wait(10)
        ended = time.monotonic() - signalled
        code, log = _exit_code(gateway, 10)
        exited = time.monotonic() - signalled

    # content was sent: the stream ends with an SSE error event, the chunked body ends cleanly
    assert after_content.status == 200
    assert "content_block_delta" in after_content.names
    name, data = after_content.events[-1]
    assert name == "error", after_content.names
    assert data["error"] == {
        "type": "overloaded_error",
        "message": "gateway shutting down; retry the request",
    }
    assert "message_stop" not in after_content.names
    # nothing was sent yet: a plain 529 the SDKs retry
    assert before_content.status == 529
    assert json.loads(before_content.body)["error"]["type"] == "overloaded_error"
    # at the deadline, not before it and not at the upstream's pace
    assert 1.4 <= ended < 4.0, ended
    assert code == 0, log
    assert exited < 6.0, exited
    assert "deadline reached" in log


def test_a_second_signal_ends_open_streams_at_once() -> None:
    with _stack(GATEWAY_DRAIN_TIMEOUT_S="30") as (port, gateway):
        stream = Exchange(port, f"stall_after={STALL_AFTER_CONTENT}:60").start()
        assert stream.content_seen.wait(10)
        gateway.send_signal(signal.SIGTERM)
        while not _refuses(port):
            time.sleep(0.02)
        time.sleep(0.3)
        assert not stream.done.is_set()  # draining: the stream would get 30 s
        signalled = time.monotonic()
        gateway.send_signal(signal.SIGINT)  # e.g. a second Ctrl-C
        stream.wait(10)
        code, log = _exit_code(gateway, 10)
        exited = time.monotonic() - signalled

    name, data = stream.events[-1]
    assert name == "error" and data["error"] == {"type": "overloaded_error", "message": SHUTDOWN_MESSAGE}
    assert code == 0, log
    assert exited < 5.0, exited


# -- the pieces, in-process ------------------------------------------------------------------------


def test_drain_timeout_settings() -> None:
    base = {"GATEWAY_API_KEYS": "k"}
    settings = Settings.from_environ(base)
    assert (settings.listener.drain_timeout_s, settings.listener.drain_delay_s) == (60.0, 0.0)
    settings = Settings.from_environ({**base, "GATEWAY_DRAIN_TIMEOUT_S": "10", "GATEWAY_DRAIN_DELAY_S": "5"})
    assert (settings.listener.drain_timeout_s, settings.listener.drain_delay_s) == (10.0, 5.0)
    with pytest.raises(ConfigError, match="GATEWAY_DRAIN_DELAY_S: must not exceed GATEWAY_DRAIN_TIMEOUT_S"):
        Settings.from_environ({**base, "GATEWAY_DRAIN_TIMEOUT_S": "1", "GATEWAY_DRAIN_DELAY_S": "2"})
    with pytest.raises(ConfigError, match="GATEWAY_DRAIN_TIMEOUT_S"):
        Settings.from_environ({**base, "GATEWAY_DRAIN_TIMEOUT_S": "-1"})


async def test_drain_wakes_every_watcher_and_forgets_them() -> None:
    drain = Drain()

    def state() -> tuple[bool, bool]:
        return drain.draining, drain.expired

    assert state() == (False, False)
    with drain.watch() as first, drain.watch() as second:
        drain.begin()
        assert state() == (True, False) and not first.done()
        assert drain.watching == 2
        drain.expire()
        assert state() == (True, True)
        await asyncio.wait_for(asyncio.gather(first, second), 1)
    assert drain.watching == 0
    with drain.watch() as late:  # a stream starting after the deadline is told at once
        assert late.done()
