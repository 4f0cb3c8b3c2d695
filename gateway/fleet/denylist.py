"""Revoked access tokens: a denylist of ``jti`` kept until the token's own ``exp``.

Access tokens are self-contained JWTs (no store read per request); revoking one (sign-out,
reuse detection, a deprovisioned user's refresh) adds its ``jti`` here until it would have
expired anyway, so the list never outgrows the tokens alive. The request path checks an
in-process dictionary; with a shared store (Redis) every replica re-reads the list every
``sync_every_s`` so a revocation made on one replica holds on all within that interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from gateway.fleet.signin_store import SigninStore

log = logging.getLogger("switchyard.fleet")


class Denylist:
    def __init__(self, store: SigninStore, clock: Callable[[], float], sync_every_s: float = 1.0) -> None:
        self._store = store
        self._clock = clock
        self.revoked: dict[str, float] = {}  # jti -> exp; read it (the request path), never write it
        self.sync_every_s = sync_every_s

    async def revoke(self, jti: str, expires_at: float) -> None:
        if expires_at <= self._clock():
            return  # already dead: nothing to remember
        self.revoked[jti] = expires_at
        await self._store.add_revoked(jti, expires_at)

    async def sync(self) -> None:
        """Re-read the store's list (expired entries leave)."""
        self.revoked = await self._store.revoked()

    @contextlib.asynccontextmanager
    async def syncing(self) -> AsyncIterator[None]:
        """Load the list, and keep re-reading it while the store is shared with other replicas."""
        await self.sync()
        task = asyncio.create_task(self._loop()) if self._store.shared else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _loop(self) -> None:
        failing = False  # said once per outage, not once per second
        while True:
            await asyncio.sleep(self.sync_every_s)
            try:
                await self.sync()
            except Exception as exc:  # a store outage: keep the last list, try again
                if not failing:
                    log.warning(
                        "sign-in denylist sync failed (%s); revocations made on other replicas wait "
                        "until it works again",
                        type(exc).__name__,
                    )
                failing = True
                continue
            if failing:
                log.warning("sign-in denylist sync works again")
            failing = False
