"""``python -m bench.rate_limits``: how accurately the gateway holds a requests-per-minute limit.

A gateway process with a policy file (``base: {rate_limits: {requests_per_minute: N}}``) in front
of the fake upstream; ``--concurrency`` clients send ``POST /v1/messages`` back to back (far faster
than allowed; a refusal is answered at once, so they keep trying) for ``--seconds`` (default 30).
Reported: requests let through per second over the whole run and after the first second (the
limit allows one second's worth as a burst), and their distance from the configured rate; the run
fails (exit 1) when the steady rate is more than 5 % off. ``make bench-rate-limits`` runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from bench import payloads, processes
from bench.loadgen import LoadConfig
from bench.servers import spawn_gateway

TOLERANCE = 0.05


async def _hammer(
    url: str, headers: dict[str, str], seconds: float, concurrency: int
) -> tuple[list[float], int]:
    allowed: list[float] = []
    refused = 0
    body = payloads.request_body(False)
    async with aiohttp.ClientSession(headers=headers) as session:
        start = time.monotonic()

        async def worker() -> None:
            nonlocal refused
            while (now := time.monotonic()) - start < seconds:
                async with session.post(url + "/v1/messages", data=body) as response:
                    await response.read()
                    if response.status == 200:
                        allowed.append(now - start)
                    elif response.status == 429:
                        refused += 1
                    else:
                        raise RuntimeError(f"unexpected status {response.status}")

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return allowed, refused


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rpm", type=int, default=1200, help="requests per minute allowed (default 1200)")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured duration (default 30)")
    parser.add_argument("--concurrency", type=int, default=8, help="clients sending at once (default 8)")
    args = parser.parse_args(argv)
    upstream, upstream_port = processes.start_upstream()
    with tempfile.TemporaryDirectory(prefix="switchyard-rate-") as scratch:
        policy = Path(scratch) / "policy.yaml"
        policy.write_text(f"base: {{rate_limits: {{requests_per_minute: {args.rpm}}}}}\n")
        probe = LoadConfig(url="http://127.0.0.1:0")
        env = {
            "GATEWAY_API_KEYS": probe.api_key,
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{upstream_port}",
            "GATEWAY_POLICY_FILE": str(policy),
            "GATEWAY_LOG_LEVEL": "WARNING",
        }
        server = spawn_gateway([sys.executable, "-m", "gateway", "serve"], env, probe, timeout=60)
        try:
            time.sleep(2.0)  # the probe's request is forgotten: the run starts with a full burst
            allowed, refused = asyncio.run(
                _hammer(server.url, probe.headers(), args.seconds, args.concurrency)
            )
        finally:
            server.close()
            processes.stop(upstream)
    configured = args.rpm / 60
    whole = len(allowed) / args.seconds
    steady = sum(1 for t in allowed if t >= 1.0) / (args.seconds - 1.0)
    error = (steady - configured) / configured
    print(
        f"requests_per_minute={args.rpm} ({configured:.2f}/s) over {args.seconds:.0f} s, {args.concurrency} clients"
    )
    print(f"  let through: {len(allowed)} ({whole:.2f}/s over the run, burst included); refused: {refused}")
    print(
        f"  after the first second: {steady:.2f}/s, {error:+.2%} from the configured rate (target within 5 %)"
    )
    return 0 if abs(error) <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
