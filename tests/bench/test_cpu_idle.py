"""The benchmark's PM QoS hold (bench.cpu_idle): what it writes, how long it keeps the file open,
and that a run goes on, saying why, when it cannot hold it. A regular file stands in for
``/dev/cpu_dma_latency`` (same open/write/close calls; the kernel reads the 32-bit value)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from bench.cpu_idle import idle_latency_held


def _open_fds_on(path: Path) -> int:
    target = os.path.realpath(path)
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                count += 1
        except OSError:
            continue
    return count


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd to see open files")
def test_writes_zero_microseconds_and_holds_the_file_until_the_block_ends(tmp_path: Path) -> None:
    device = tmp_path / "cpu_dma_latency"
    device.write_bytes(b"")
    with idle_latency_held(True, str(device)) as status:
        assert status == f"held at 0 us ({device})"
        assert struct.unpack("i", device.read_bytes()) == (0,)
        assert _open_fds_on(device) == 1  # the request lasts while the file is open
    assert _open_fds_on(device) == 0


def test_disabled_touches_nothing(tmp_path: Path) -> None:
    device = tmp_path / "cpu_dma_latency"
    device.write_bytes(b"x")
    with idle_latency_held(False, str(device)) as status:
        assert status == "not held: --no-idle-qos"
    assert device.read_bytes() == b"x"


def test_missing_device_says_why_and_runs_the_block(tmp_path: Path) -> None:
    ran = False
    with idle_latency_held(True, str(tmp_path / "absent")) as status:
        ran = True
    assert ran
    assert status.startswith("not held: ") and "No such file" in status


def test_unopenable_device_says_why(tmp_path: Path) -> None:
    # a directory cannot be opened for writing, by root either (EISDIR)
    with idle_latency_held(True, str(tmp_path)) as status:
        assert status.startswith(f"not held: {tmp_path}: ") and "directory" in status
