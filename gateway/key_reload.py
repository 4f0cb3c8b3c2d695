"""Reloading the inbound keys file (``GATEWAY_API_KEYS_FILE``) while the gateway serves.

Triggers: polling the file's ``stat`` and ``SIGHUP``. The new key set replaces the old in one
assignment; a bad file keeps the keys in force. Logs never name a key.

Details: docs/internals/gateway.md
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from gateway.keys import InboundKey, KeyRing, Role, parse_key_text
from gateway.settings.client_auth import AuthSettings

log = logging.getLogger("switchyard.keys")

MAX_RELOAD_INTERVAL_S = 300.0
FILE_CHANGE = "file change"
SIGHUP = "SIGHUP"
START_UP = "start-up"

Signature = tuple[int, int, int, int]  # device, inode, mtime (ns), size


def _signature(path: Path) -> Signature:
    stat = os.stat(path)  # follows symlinks (Kubernetes' ..data swap changes the target)
    return (stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size)


class KeyReloader:
    """Keeps ``ring`` equal to ``static`` plus the keys in ``path``, re-read on change or request."""

    def __init__(
        self,
        ring: KeyRing,
        static: Iterable[InboundKey],
        path: Path,
        *,
        interval_s: float,
        allow_empty: bool = False,
        on_reload: Callable[[KeyRing], None] = lambda ring: None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.ring = ring
        self.path = path
        self.interval_s = min(interval_s, MAX_RELOAD_INTERVAL_S)
        self._static = tuple(static)
        self._allow_empty = allow_empty
        self._on_reload = on_reload
        self._sleep = sleep
        self._seen: Signature | None = None  # the file version last read (loaded or refused)
        self._content: bytes | None = None  # digest of the content in force
        self.reloads = 0
        self.failures = 0

    @classmethod
    def for_settings(
        cls, auth: AuthSettings, ring: KeyRing, *, on_reload: Callable[[KeyRing], None]
    ) -> KeyReloader | None:
        """The reloader of ``GATEWAY_API_KEYS_FILE`` (``None`` without one), having read the file
        once to learn its version; ``ring`` then holds its keys and ``GATEWAY_API_KEYS``'."""
        if auth.api_keys_file is None:
            return None
        reloader = cls(
            ring,
            auth.static_keys,
            auth.api_keys_file,
            interval_s=auth.api_keys_reload_s,
            allow_empty=auth.allow_unauthenticated,
            on_reload=on_reload,
        )
        reloader.reload(START_UP)
        return reloader

    def check(self) -> bool:
        """Reload if the file changed since it was last read; ``True`` if new keys are in force."""
        try:
            signature = _signature(self.path)
        except OSError as exc:
            if self._seen is not None:  # log the disappearance once
                self._seen = None
                self._refuse(f"cannot read it ({type(exc).__name__}: {exc.strerror or exc})")
            return False
        if signature == self._seen:
            return False
        return self.reload(FILE_CHANGE, expected=signature)

    def reload(self, trigger: str, *, expected: Signature | None = None) -> bool:
        """Read and parse the file; put the keys in force unless it is invalid. Logs one line
        (nothing for the ``start-up`` read, which only repeats what the settings just loaded)."""
        before: Signature | None = None
        try:
            before = _signature(self.path)
            raw = self.path.read_bytes()
            after = _signature(self.path)
        except OSError as exc:
            self._seen = before  # an unreadable version is reported once, not at every poll
            self._refuse(f"cannot read it ({type(exc).__name__}: {exc.strerror or exc})", trigger)
            return False
        if before != after or (expected is not None and before != expected):
            # written while we read it: the next poll (or signal) reads the finished file
            log.info(
                "inbound keys: %s changed while being read (%s); reading it again later", self.path, trigger
            )
            return False
        self._seen = after
        digest = hashlib.sha256(raw).digest()
        if digest == self._content:
            if trigger != FILE_CHANGE:  # an explicit request deserves an answer
                log.info(
                    "inbound keys: %s unchanged (%s); %d keys in force", self.path, trigger, len(self.ring)
                )
            return False
        try:
            keys = [*self._static, *parse_key_text(raw.decode("utf-8"), str(self.path))]
        except (UnicodeDecodeError, ValueError) as exc:
            self._refuse(str(exc), trigger)
            return False
        if not keys and not self._allow_empty:
            self._refuse("it holds no key (and GATEWAY_ALLOW_UNAUTHENTICATED is off)", trigger)
            return False
        old = {key.digest for key in self.ring.entries()}
        new = {key.digest for key in keys}
        self.ring.replace(keys)
        self._content = digest
        self._on_reload(self.ring)
        if trigger == START_UP:
            return True
        self.reloads += 1
        log.info(
            "inbound keys reloaded from %s (%s): %d keys (%d metrics-only), %d added, %d removed; teams: %s",
            self.path,
            trigger,
            len(self.ring),
            sum(1 for key in keys if key.role is Role.METRICS),
            len(new - old),
            len(old - new),
            ",".join(sorted(self.ring.teams)) or "-",
        )
        return True

    def _refuse(self, reason: str, trigger: str = FILE_CHANGE) -> None:
        self.failures += 1
        log.warning(
            "inbound keys: not reloading %s (%s): %s; keeping the %d keys in force",
            self.path,
            trigger,
            reason,
            len(self.ring),
        )

    async def run(self) -> None:
        """Poll the file every ``interval_s`` seconds until cancelled (nothing if polling is off)."""
        if self.interval_s <= 0:
            return
        while True:
            await self._sleep(self.interval_s)
            try:
                self.check()
            except Exception:  # never let the watcher die: the next poll tries again
                log.exception("inbound keys: checking %s failed", self.path)
