"""Several replicas behind one Service: two gateway *processes* sharing one real Redis and one
emulator, one session's requests alternating between them. Latches and cache behaviour must be
identical to a single process serving the same session."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anthropic
import requests

from emulators import EmulatorConfig, RunningEmulator, emulator_in_thread
from tests.support import binaries
from tests.support.redis_server import running_redis

UPSTREAM_KEY = "sk-up-replicas"
CLIENT_KEY = "sk-client-replicas"
LATCHED = "context-management-2025-06-27"
SYSTEM = [
    {"type": "text", "text": "You are a careful engineer. " * 400, "cache_control": {"type": "ephemeral"}}
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _wait(url: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            requests.get(url, timeout=1)
            return
        except requests.ConnectionError:
            time.sleep(0.05)
    raise TimeoutError(url)


@contextmanager
def _process(args: list[str], env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(
        args,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def _gateway(emulator: RunningEmulator, redis_url: str) -> Iterator[str]:
    port = _free_port()
    env = {
        "GATEWAY_PORT": str(port),
        "GATEWAY_API_KEYS": CLIENT_KEY,
        "ANTHROPIC_API_KEY": UPSTREAM_KEY,
        "ANTHROPIC_BASE_URL": emulator.base_url,
        "GATEWAY_SESSION_STORE": redis_url,
        "GATEWAY_LOG_LEVEL": "WARNING",
    }
    with _process([sys.executable, "-m", "gateway", "serve"], env) as process:
        url = f"http://127.0.0.1:{port}"
        _wait(url + "/healthz")
        yield url
        assert process.poll() is None, "a gateway replica died"


def _turns(urls: list[str], session: str, emulator: RunningEmulator) -> list[tuple[int, int, list[str]]]:
    """Six turns of one session, turn i served by urls[i % len(urls)]; the client sends the
    latchable beta on turn 1 only. Returns (cache_read, cache_write, upstream betas) per turn."""
    messages: list[dict[str, object]] = []
    results = []
    for turn in range(6):
        messages.append(
            {
                "role": "user",
                "content": [{"type": "text", "text": f"step {turn}", "cache_control": {"type": "ephemeral"}}],
            }
        )
        sent = [
            {
                **m,
                "content": [
                    {k: v for k, v in b.items() if k != "cache_control" or i == len(messages) - 1}
                    for b in m["content"]
                ],
            }  # type: ignore[union-attr]
            for i, m in enumerate(messages)
        ]
        client = anthropic.Anthropic(api_key=CLIENT_KEY, base_url=urls[turn % len(urls)], max_retries=0)
        betas = {"anthropic-beta": LATCHED} if turn == 0 else {}
        before = len(emulator.requests)
        message = client.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=64,
            system=SYSTEM,
            messages=sent,  # type: ignore[arg-type]
            extra_headers={"X-Claude-Code-Session-Id": session, **betas},
        )
        (received,) = emulator.requests[before:]
        upstream_betas = [v for k, v in received.headers if k.lower() == "anthropic-beta"]
        results.append(
            (
                message.usage.cache_read_input_tokens or 0,
                message.usage.cache_creation_input_tokens or 0,
                upstream_betas,
            )
        )
        messages.append({"role": "assistant", "content": [{"type": "text", "text": message.content[0].text}]})  # type: ignore[union-attr]
    return results


@binaries.skip_unless("redis-server")
def test_two_replicas_behave_like_one(tmp_path: Path) -> None:
    with (
        running_redis(tmp_path) as redis,
        emulator_in_thread(EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY}))) as emulator,
    ):
        redis_url = redis.url
        with _gateway(emulator, redis_url) as a, _gateway(emulator, redis_url) as b:
            replicated = _turns([a, b], "session-two-replicas", emulator)
            emulator.cache.clear()  # the single-process run starts from a cold upstream cache too
            single = _turns([a], "session-one-replica", emulator)
    # the latch set through A on turn 1 reaches the upstream on every later turn, whichever replica
    assert all(LATCHED in betas[0] for _, _, betas in replicated)
    # and cache behaviour is the same as with one process: same reads and writes, turn by turn
    assert [(r, w) for r, w, _ in replicated] == [(r, w) for r, w, _ in single]
    assert all(read > 0 for read, _, _ in replicated[1:])
