"""An upstream key read from a file (``GATEWAY_FOUNDRY_API_KEY_FILE``,
``GATEWAY_BEDROCK_BEARER_TOKEN_FILE``, per upstream in ``GATEWAY_UPSTREAMS_FILE``), held by its
provider and re-read when the upstream refuses it (401/403) or on ``SIGHUP``.

A rotated Kubernetes secret is picked up at the first refusal, no restart, no ``stat`` per
request; the settings keep the key of start-up. An unreadable or empty file keeps the key in use
and logs one warning naming the file (never a key).

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from pathlib import Path
from typing import Final

from pydantic import SecretStr

from gateway.settings.section import key_from_file

log = logging.getLogger("switchyard.upstream_keys")

REFUSED: Final = "refused by the upstream"
SIGHUP: Final = "SIGHUP"

# the key file and key generation the current task's last attempt was sent with: a request
# refused with a key that another request's refusal has replaced since retries with the new one
_SENT_WITH: ContextVar[tuple[KeyFile, int] | None] = ContextVar("switchyard_upstream_key_sent", default=None)


class KeyFile:
    """The key in use for one upstream, first the one the settings read at start-up."""

    def __init__(self, path: Path, variable: str, key: SecretStr) -> None:
        self.path = path
        self.variable = variable  # the setting naming the file, for the log
        self._key = key
        self.generation = 0  # how many times a new key was put in use
        self._failure: str | None = None  # the problem last logged (logged once until a good read)

    @property
    def key(self) -> str:
        return self._key.get_secret_value()

    def sent(self) -> None:
        """Note that this task's attempt goes out with the key in use now (one context-variable set)."""
        _SENT_WITH.set((self, self.generation))

    def refresh(self) -> bool:
        """The upstream refused the key: ``True`` if a newer key is in use than the refused one
        (read from the file now, or by a request refused before this one)."""
        sent = _SENT_WITH.get()
        if sent is not None and sent[0] is self and sent[1] != self.generation:
            return True
        return self.reload(REFUSED)

    def reload(self, trigger: str) -> bool:
        """Read the file; put its key in use if it differs from the one in use (``True`` then)."""
        try:
            key = key_from_file(self.path, self.variable)
        except ValueError as exc:  # names the variable and the cause, never the content
            reason = str(exc).removeprefix(f"{self.variable}: ")
            if reason != self._failure:
                self._failure = reason
                log.warning(
                    "upstream key file %s (%s) not re-read (%s): %s; keeping the key in use",
                    self.path,
                    self.variable,
                    trigger,
                    reason,
                )
            return False
        self._failure = None
        if key.get_secret_value() == self.key:
            if trigger == SIGHUP:
                log.info("upstream key file %s (%s) unchanged (%s)", self.path, self.variable, trigger)
            return False
        self._key = key
        self.generation += 1
        log.info(
            "upstream key re-read from %s (%s, %s): a new key is in use", self.path, self.variable, trigger
        )
        return True


def key_file(path: Path | None, variable: str, key: SecretStr | None) -> KeyFile | None:
    """The :class:`KeyFile` of a ``*_FILE`` setting the settings read ``key`` from (``None``
    when the key came from elsewhere or is unset)."""
    if path is None or key is None:
        return None
    return KeyFile(path, variable, key)
