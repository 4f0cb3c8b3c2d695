"""The providers' emulators in a process of their own, for :mod:`bench.provider_latency`.

``python -m bench.provider_emulator --providers anthropic,bedrock --workdir DIR``
    Runs :func:`~emulators.upstreams.emulated_upstream` for each provider (fixture
    credentials, each on a free loopback port, all on one uvloop event loop) and prints one JSON
    line: ``{provider: {"base_url", "env", "process_env"}}``, the settings a gateway needs to
    reach each emulator and the variables the cloud SDKs read themselves. Runs until
    SIGTERM/SIGINT or until its standard input closes (so it never outlives the benchmark).

:func:`start_emulators` is the parent's side: it spawns that process and returns what it printed.
A process of its own keeps the emulators off the event loop and the interpreter (GIL) of the
benchmark's client. The providers share it because only one provider's path is measured at a
time (the other emulator is idle) and the emulator's imports (the ``anthropic`` SDK) are slow
enough to be worth paying once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench import REPO_ROOT, evloop
from bench.processes import BenchError, stop


@dataclass(frozen=True)
class EmulatorProcess:
    """One provider's emulator (several may share one process)."""

    provider: str
    proc: subprocess.Popen[bytes]
    base_url: str
    env: dict[str, str]  # for the gateway (provider selection, base URL, upstream key)
    process_env: dict[str, str]  # what SDKs read from the environment (AWS credential chain)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        stop(self.proc)


def _pinner(cpus: set[int] | None) -> Callable[[], None] | None:
    if not cpus:
        return None
    frozen = set(cpus)
    return lambda: os.sched_setaffinity(0, frozen)


def start_emulators(
    providers: Sequence[str], workdir: Path, cpus: set[int] | None = None, timeout: float = 30.0
) -> list[EmulatorProcess]:
    """Spawn one process emulating ``providers``; returns once every emulator listens."""
    cmd = [
        sys.executable,
        "-m",
        "bench.provider_emulator",
        "--providers",
        ",".join(providers),
        "--workdir",
        str(workdir),
    ]
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, preexec_fn=_pinner(cpus), cwd=REPO_ROOT
    )
    stdout = proc.stdout
    assert stdout is not None
    ready: list[bytes] = []
    reader = threading.Thread(target=lambda: ready.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    line = ready[0] if ready else b""
    try:
        info = orjson.loads(line)
        return [
            EmulatorProcess(
                p, proc, str(info[p]["base_url"]), dict(info[p]["env"]), dict(info[p]["process_env"])
            )
            for p in providers
        ]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        stop(proc)
        raise BenchError(f"emulators did not start (said {line[:200]!r})") from None


async def _serve(providers: Sequence[str], workdir: Path) -> None:
    from emulators.upstreams import emulated_upstream  # slow (the anthropic SDK): child only

    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, done.set)
    stdin = sys.stdin.fileno()

    def on_stdin() -> None:  # end of file: the parent went away (or closed the pipe), stop
        if not os.read(stdin, 4096):
            loop.remove_reader(stdin)
            done.set()

    loop.add_reader(stdin, on_stdin)
    async with contextlib.AsyncExitStack() as stack:
        info = {}
        for provider in providers:
            (workdir / provider).mkdir(parents=True, exist_ok=True)
            upstream = await stack.enter_async_context(emulated_upstream(provider, workdir / provider))
            info[provider] = {
                "base_url": upstream.emulator.base_url,
                "env": upstream.env,
                "process_env": upstream.process_env,
            }
        sys.stdout.buffer.write(orjson.dumps(info) + b"\n")
        sys.stdout.flush()
        await done.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.provider_emulator", description=__doc__)
    parser.add_argument(
        "--providers", required=True, help="comma-separated: anthropic,bedrock,vertex,foundry"
    )
    parser.add_argument("--workdir", required=True, type=Path, help="directory for credential files")
    args = parser.parse_args(argv)
    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    evloop.run(_serve(providers, args.workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
