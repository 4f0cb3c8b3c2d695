"""A throwaway Prometheus server (the Debian ``prometheus`` binary) for tests, and its HTTP API."""

from __future__ import annotations

import asyncio
import contextlib
import math
import shutil
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from tests.support import binaries

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
MISSING = binaries.missing_reason(binaries.missing("prometheus", "promtool") or ["prometheus", "promtool"])
SCRAPE_INTERVAL_S = 1.0
JOB = "switchyard"


class QueryError(AssertionError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def scrape_config(
    target: str, credentials: str, rule_files: list[Path], jobs: tuple[str, ...] = (JOB,)
) -> str:
    """Prometheus configuration (JSON is valid YAML): 1 s scrapes, rules every second; one job per
    name in ``jobs``, all scraping ``target`` (several deployments as one Prometheus sees them)."""
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [
            {
                "job_name": job,
                "metrics_path": "/metrics",
                "authorization": {"type": "Bearer", "credentials": credentials},
                "static_configs": [{"targets": [target]}],
            }
            for job in jobs
        ],
    }
    return orjson.dumps(config, option=orjson.OPT_INDENT_2).decode()


@dataclass
class Prometheus:
    base_url: str
    session: aiohttp.ClientSession
    log: Path

    async def api(self, path: str, **params: str) -> Any:
        async with self.session.get(f"{self.base_url}/api/v1/{path}", params=params) as response:
            body = orjson.loads(await response.read())
        if body.get("status") != "success":
            raise QueryError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    async def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        data = await self.api("query", **params)
        result = data["result"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": result}]
        assert data["resultType"] == "vector", data["resultType"]
        return list(result)

    async def scrapes_after(self, after: float, count: int, timeout_s: float = 20.0) -> float:
        """Wait for ``count`` scrapes of the job that started after ``after``; the last one's time."""
        seen: set[float] = set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            # timestamp() of a plain selector is the sample's (the scrape's) time; of any other
            # expression it would be the evaluation time
            for sample in await self.query(f'timestamp(up{{job="{JOB}"}})'):
                stamp = float(sample["value"][1])
                if stamp > after and await self.query(f'up{{job="{JOB}"}} == 1', stamp):
                    seen.add(stamp)
            if len(seen) >= count:
                return max(seen)
            await asyncio.sleep(SCRAPE_INTERVAL_S / 4)
        raise AssertionError(f"fewer than {count} scrapes after {after}; see {self.log}")


def finite_values(samples: list[dict[str, Any]]) -> list[float]:
    values = (float(sample["value"][1]) for sample in samples)
    return [value for value in values if math.isfinite(value)]


@contextlib.asynccontextmanager
async def running_prometheus(directory: Path, config: str) -> AsyncIterator[Prometheus]:
    assert PROMETHEUS is not None, MISSING
    config_path = directory / "prometheus.yml"
    config_path.write_text(config, encoding="utf-8")
    log = directory / "prometheus.log"
    port = free_port()
    with log.open("wb") as output:
        process = await asyncio.create_subprocess_exec(
            PROMETHEUS,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
            stdout=output,
            stderr=output,
        )
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            prometheus = Prometheus(f"http://127.0.0.1:{port}", session, log)
            await _ready(prometheus, process)
            yield prometheus
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()


async def _ready(prometheus: Prometheus, process: asyncio.subprocess.Process) -> None:
    for _ in range(150):
        if process.returncode is not None:
            raise AssertionError(f"prometheus exited: {prometheus.log.read_text(errors='replace')}")
        with contextlib.suppress(aiohttp.ClientError):
            async with prometheus.session.get(f"{prometheus.base_url}/-/ready") as response:
                if response.status == 200:
                    return
        await asyncio.sleep(0.1)
    raise AssertionError(f"prometheus not ready after 15 s: {prometheus.log.read_text(errors='replace')}")
