"""Keeping idle CPUs out of halt for a benchmark run (Linux PM QoS, ``/dev/cpu_dma_latency``).

At c=1 a request hops between processes four times (load generator -> target -> upstream ->
target -> load generator), and between hops the receiving CPU is idle. On a virtual machine
whose guest does not poll before halting (``haltpoll.guest_halt_poll_ns=0`` on the kernel
command line, as on the Firecracker VMs this benchmark has run on), an idle vCPU halts and
waking it costs a host reschedule. Measured there (50-delta streams, c=1), the pass-through's p50
went from 0.73 ms (p90 2.46 ms: two modes) to 0.46 ms (p90 0.56 ms) with the request held, the
gateway's from 0.83 ms (p90 1.69 ms) to 0.61 ms (p90 0.79 ms). That wake-up latency is the
machine's, not the target's, and it swamped the difference the latency targets are about.

Writing a 32-bit 0 to ``/dev/cpu_dma_latency`` and keeping the file open asks cpuidle for
states with no exit latency only (polling); closing the file withdraws the request (kernel
``Documentation/power/pm_qos_interface.rst``). Latency benchmarks do the same (``cyclictest``;
``tuned``'s latency-performance profile sets ``force_latency``). It applies to every target of
the run alike. The polling itself is idle time, charged to no process, but the wake-ups it
avoids were charged to the processes: every target's CPU per request drops, the floor's most in
relative terms, so the gateway / pass-through ratios rise (README, "Idle CPUs"). Needs write
access to the device (root); otherwise the run goes on without it and the report says why.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

DEVICE: Final = "/dev/cpu_dma_latency"
NO_EXIT_LATENCY: Final = struct.pack("i", 0)  # microseconds, native-endian int32 (the kernel's format)


@contextmanager
def idle_latency_held(enabled: bool = True, device: str = DEVICE) -> Iterator[str]:
    """Hold the PM QoS CPU latency request at 0 µs while the block runs; yields what was done,
    for the report: ``held at 0 us (<device>)`` or ``not held: <why>``."""
    if not enabled:
        yield "not held: --no-idle-qos"
        return
    try:
        fd = os.open(device, os.O_WRONLY)
    except OSError as exc:
        yield f"not held: {device}: {exc.strerror or exc}"
        return
    try:
        try:
            os.write(fd, NO_EXIT_LATENCY)
        except OSError as exc:
            yield f"not held: writing {device}: {exc.strerror or exc}"
            return
        yield f"held at 0 us ({device})"
    finally:
        os.close(fd)  # the request ends with the last open file
