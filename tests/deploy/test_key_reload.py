"""Inbound keys rotate without a restart, and a metrics-only key reads /metrics and nothing else.

Real ``python -m gateway serve`` processes in front of a real emulator: the keys file is replaced
(atomically, as kubelet and editors do) and the running process must refuse the old key and admit
the new one, on SIGHUP and, with polling on, by itself, through a Kubernetes Secret volume's
``..data`` symlink layout. The roles are checked in-process against every route.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests

from emulators import EmulatorConfig, RunningEmulator, emulator_in_thread
from gateway.app import KEY_RELOADER_KEY, create_app
from gateway.config import Settings
from gateway.key_reload import KeyReloader
from gateway.process import running
from tests.support.threaded import LoopThread

UPSTREAM_KEY = "sk-up-key-reload"
OLD_KEY = "sk-client-old-5d1e"
NEW_KEY = "sk-client-new-a7c3"
METRICS_KEY = "sk-metrics-only-09b2"
MESSAGE: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "hi"}],
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _replace(path: Path, text: str) -> None:
    staging = path.with_name(path.name + ".new")
    staging.write_text(text)
    os.replace(staging, path)


def _status(url: str, key: str, path: str = "/v1/messages") -> int:
    if path == "/metrics" or path.startswith(("/v1/models", "/v1/sessions")):
        return requests.get(url + path, headers={"x-api-key": key}, timeout=10).status_code
    return requests.post(url + path, json=MESSAGE, headers={"x-api-key": key}, timeout=10).status_code


def _until(condition: Callable[[], bool], timeout_s: float = 10.0) -> float:
    """Wait until ``condition()``; returns the seconds it took."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"not true after {timeout_s} s")
        time.sleep(0.02)
    return time.monotonic() - started


@contextmanager
def _gateway(
    emulator: RunningEmulator, keys: Path, log: Path, **env: str
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = _free_port()
    environ = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "GATEWAY_PORT": str(port),
        "GATEWAY_API_KEYS_FILE": str(keys),
        "ANTHROPIC_API_KEY": UPSTREAM_KEY,
        "ANTHROPIC_BASE_URL": emulator.base_url,
        "GATEWAY_MAX_RETRIES": "0",
        **env,
    }
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve"], env=environ, stdout=subprocess.DEVNULL, stderr=stderr
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _until(lambda: _reachable(url), 20)
        yield url, process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _reachable(url: str) -> bool:
    try:
        return requests.get(url + "/healthz", timeout=1).status_code == 200
    except requests.ConnectionError:
        return False


def _key_log_lines(log: Path) -> list[str]:
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return [entry["message"] for entry in lines if entry["logger"] == "switchyard.keys"]


@pytest.fixture(scope="module")
def emulator() -> Iterator[RunningEmulator]:
    with emulator_in_thread(EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY}))) as running_emulator:
        yield running_emulator


def test_sighup_rotates_the_keys_of_a_running_process(emulator: RunningEmulator, tmp_path: Path) -> None:
    keys, log = tmp_path / "api-keys", tmp_path / "gateway.log"
    keys.write_text(f"{OLD_KEY} team-a\n{METRICS_KEY} monitoring role=metrics\n")
    with _gateway(emulator, keys, log, GATEWAY_API_KEYS_RELOAD_S="0") as (url, process):
        assert _status(url, OLD_KEY) == 200
        _replace(keys, f"{NEW_KEY} team-a\n{METRICS_KEY} monitoring role=metrics\n")
        time.sleep(0.3)  # polling is off: nothing happens until the signal
        assert _status(url, OLD_KEY) == 200 and _status(url, NEW_KEY) == 401
        process.send_signal(signal.SIGHUP)
        _until(lambda: _status(url, OLD_KEY) == 401)
        assert _status(url, NEW_KEY) == 200
        assert _status(url, METRICS_KEY, "/metrics") == 200

        # a broken file keeps the keys in force and says why, once
        _replace(keys, f"{OLD_KEY} team-a extra-field\n")
        process.send_signal(signal.SIGHUP)
        _until(lambda: len(_key_log_lines(log)) == 2)
        assert _status(url, NEW_KEY) == 200 and _status(url, OLD_KEY) == 401
        assert process.poll() is None  # the same process throughout
    reloaded, refused = _key_log_lines(log)
    assert "reloaded" in reloaded and "(SIGHUP): 2 keys (1 metrics-only), 1 added, 1 removed" in reloaded
    assert "not reloading" in refused and ":1: expected 'key [team]'" in refused
    text = log.read_text()
    assert all(key not in text for key in (OLD_KEY, NEW_KEY, METRICS_KEY))


def test_a_changed_secret_volume_is_picked_up_without_a_signal(
    emulator: RunningEmulator, tmp_path: Path
) -> None:
    """The Secret volume layout kubelet writes: ``api-keys -> ..data/api-keys``, ``..data`` a
    symlink swapped to a new timestamped directory on every update."""
    volume = tmp_path / "keys"
    volume.mkdir()

    def publish(version: str, text: str) -> None:
        (volume / version).mkdir()
        (volume / version / "api-keys").write_text(text)
        (volume / "..data_tmp").symlink_to(version)
        os.replace(volume / "..data_tmp", volume / "..data")

    publish("..2026_05_01_10_00_00.1", f"{OLD_KEY} team-a\n")
    (volume / "api-keys").symlink_to("..data/api-keys")
    log = tmp_path / "gateway.log"
    with _gateway(emulator, volume / "api-keys", log, GATEWAY_API_KEYS_RELOAD_S="0.2") as (url, process):
        assert _status(url, OLD_KEY) == 200
        publish("..2026_05_01_10_01_00.2", f"{NEW_KEY} team-a\n")
        took = _until(lambda: _status(url, NEW_KEY) == 200)
        assert _status(url, OLD_KEY) == 401 and process.poll() is None
    assert took < 2.0  # within a few poll intervals
    (line,) = _key_log_lines(log)
    assert "(file change): 1 keys (0 metrics-only), 1 added, 1 removed" in line


# -- roles, in-process -------------------------------------------------------------------------------


@pytest.fixture
def gateway_url(loop_thread: LoopThread, emulator: RunningEmulator, tmp_path: Path) -> str:
    keys = tmp_path / "api-keys"
    keys.write_text(f"{OLD_KEY} team-a\n{METRICS_KEY} monitoring role=metrics\n")
    settings = Settings.from_environ(
        {
            "GATEWAY_API_KEYS_FILE": str(keys),
            "GATEWAY_API_KEYS_RELOAD_S": "0",
            "ANTHROPIC_API_KEY": UPSTREAM_KEY,
            "ANTHROPIC_BASE_URL": emulator.base_url,
        }
    )
    return loop_thread.enter(running(create_app(settings), "127.0.0.1", 0)).base_url


ROUTES = ("/v1/messages", "/v1/messages/count_tokens", "/v1/models", "/v1/sessions/some-session")


def test_a_metrics_key_reads_metrics_and_calls_no_model(gateway_url: str) -> None:
    assert _status(gateway_url, METRICS_KEY, "/metrics") == 200
    for path in ROUTES:
        response = (
            requests.post(gateway_url + path, json=MESSAGE, headers={"x-api-key": METRICS_KEY}, timeout=10)
            if path.startswith("/v1/messages")
            else requests.get(
                gateway_url + path, headers={"authorization": f"Bearer {METRICS_KEY}"}, timeout=10
            )
        )
        assert response.status_code == 403, path
        assert response.headers["x-should-retry"] == "false"
        assert response.json()["error"] == {
            "type": "permission_error",
            "message": "this API key has the metrics role: it may read /metrics only",
        }
    # client keys never read the team and spend series
    assert _status(gateway_url, OLD_KEY, "/metrics") == 403
    assert _status(gateway_url, OLD_KEY) == 200
    assert _status(gateway_url, "sk-unknown", "/metrics") == 401


def test_client_keys_never_read_metrics_and_a_reloaded_metrics_key_does(
    loop_thread: LoopThread, emulator: RunningEmulator, tmp_path: Path
) -> None:
    """/metrics holds every team's spend: no client key reads it, with or without a metrics key;
    a metrics key added to the file (a reload, no restart) reads it at once."""
    keys = tmp_path / "api-keys"
    keys.write_text(f"{OLD_KEY} team-a\n")
    settings = Settings.from_environ(
        {
            "GATEWAY_API_KEYS": NEW_KEY,
            "GATEWAY_API_KEYS_FILE": str(keys),
            "GATEWAY_API_KEYS_RELOAD_S": "0",
            "ANTHROPIC_API_KEY": UPSTREAM_KEY,
            "ANTHROPIC_BASE_URL": emulator.base_url,
        }
    )
    app = create_app(settings)
    url = loop_thread.enter(running(app, "127.0.0.1", 0)).base_url
    assert _status(url, OLD_KEY, "/metrics") == _status(url, NEW_KEY, "/metrics") == 403
    assert _status(url, METRICS_KEY, "/metrics") == 401
    _replace(keys, f"{OLD_KEY} team-a\n{METRICS_KEY} role=metrics\n")
    assert loop_thread.run(_check(app[KEY_RELOADER_KEY]))
    assert _status(url, OLD_KEY, "/metrics") == _status(url, NEW_KEY, "/metrics") == 403
    assert _status(url, METRICS_KEY, "/metrics") == 200


async def _check(reloader: KeyReloader) -> bool:
    return reloader.check()  # on the app's loop, as its poller would
