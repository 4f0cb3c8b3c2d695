"""What the cloud really serves: the model catalogue read from its control plane, kept fresh.

Off by default (``GATEWAY_MODEL_DISCOVERY``). A failed read never stops start-up and never
replaces the last good catalogue.

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

log = logging.getLogger("switchyard.model_discovery")

Fetch = Callable[[], Awaitable[frozenset[str]]]
"""Reads the upstream ids the cloud serves (raises on failure)."""

Sleep = Callable[[float], Awaitable[None]]


class DiscoveryError(Exception):
    """The control plane could not be read; the message is safe to log (no credentials)."""


@dataclass(frozen=True, slots=True)
class ServedModels:
    """One successful read: upstream ids as the cloud lists them, and when."""

    ids: frozenset[str]
    fetched_at: float

    @property
    def names(self) -> frozenset[str]:
        """The ids without a Vertex ``@version`` (Vertex lists models, not every dated version)."""
        return frozenset(i.partition("@")[0] for i in self.ids)


DEFAULT_SOURCE: Final = "control plane"


class ModelCatalogue:
    """The served-model list of one upstream, refreshed in the background."""

    def __init__(
        self,
        fetch: Fetch,
        *,
        source: str = DEFAULT_SOURCE,
        interval_s: float,
        timeout_s: float,
        clock: Callable[[], float] = time.time,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._fetch = fetch
        self.source = source
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._clock = clock
        self._sleep = sleep
        self._task: asyncio.Task[None] | None = None
        self.current: ServedModels | None = None
        self.reads = 0
        """Successful reads so far."""
        self.failures = 0
        """Failed reads so far."""
        self.last_error: str | None = None

    async def start(self) -> None:
        """Read once (bounded; failures logged, never raised), then refresh periodically."""
        await self.refresh()
        if self._interval_s > 0 and self._task is None:
            self._task = asyncio.create_task(self._refresh_forever(), name="model-discovery")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def refresh(self) -> bool:
        """One bounded read; ``True`` when it replaced the catalogue."""
        try:
            async with asyncio.timeout(self._timeout_s):
                ids = await self._fetch()
        except TimeoutError:
            return self._failed(f"no answer within {self._timeout_s:g}s")
        except DiscoveryError as exc:
            return self._failed(str(exc))
        except Exception as exc:  # any failure keeps the gateway serving
            return self._failed(type(exc).__name__)
        if not ids:
            return self._failed("the control plane listed no Anthropic models")
        previous = self.current
        self.current = ServedModels(ids, self._clock())
        self.reads += 1
        self.last_error = None
        if previous is None or previous.ids != ids:
            log.info(
                "model catalogue from the %s: %d models: %s", self.source, len(ids), ", ".join(sorted(ids))
            )
        return True

    def describe(self) -> str:
        """For the start-up log: what the catalogue holds and where it came from."""
        if self.current is None:
            reason = f": {self.last_error}" if self.last_error else ""
            return f"on, not read yet ({self.source}{reason}); naming patterns apply"
        return f"on, {len(self.current.ids)} models from the {self.source}"

    def _failed(self, reason: str) -> bool:
        self.failures += 1
        self.last_error = reason
        keeping = "keeping the last catalogue" if self.current is not None else "using the naming patterns"
        log.warning("model discovery from the %s failed (%s); %s", self.source, reason, keeping)
        return False

    async def _refresh_forever(self) -> None:
        while True:
            await self._sleep(self._interval_s)
            await self.refresh()
