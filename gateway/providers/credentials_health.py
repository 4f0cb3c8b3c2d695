"""Credential failures named by cause, and the readiness rule built on them.

A :class:`CredentialFailure` message names the cause and never a secret; its status says who can
fix it. :class:`CredentialHealth` makes ``/readyz`` fail after
``GATEWAY_CREDENTIAL_FAILURES_NOT_READY`` consecutive failed fetches.

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gateway.egress import EgressFailure
from gateway.errors import GatewayError
from gateway.settings.upstream_egress import EgressSettings

log = logging.getLogger("switchyard.credentials")


class CredentialFailure(Exception):
    """A credential fetch failed; ``message`` names the cause and is safe to show a client."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 401,
        retryable: bool = False,
        egress: EgressFailure | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retryable = retryable
        self.egress = egress

    @classmethod
    def from_egress(cls, prefix: str, failure: EgressFailure) -> CredentialFailure:
        return cls(f"{prefix}: {failure.message}", status=502, retryable=failure.retryable, egress=failure)

    def as_gateway_error(self) -> GatewayError:
        if self.status == 401:
            return GatewayError(401, self.message, error_type="authentication_error", should_retry=False)
        error = GatewayError(self.status, self.message, error_type="api_error")
        error.retryable = self.retryable
        if not self.retryable:
            error.should_retry = False
        return error


class CredentialHealth:
    """Consecutive credential-fetch failures of one provider, for ``/readyz``."""

    def __init__(
        self, threshold: int = 3, recheck_s: float = 30.0, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.threshold = threshold
        self.recheck_s = recheck_s
        self._clock = clock
        self.consecutive_failures = 0
        self.last_failure: str | None = None
        self._next_recheck = 0.0

    @classmethod
    def for_egress(cls, egress: EgressSettings) -> CredentialHealth:
        """The bounds GATEWAY_CREDENTIAL_FAILURES_NOT_READY and GATEWAY_CREDENTIAL_RECHECK_S set."""
        return cls(egress.credential_failures_not_ready, egress.credential_recheck_s)

    def succeeded(self) -> None:
        if self.consecutive_failures >= self.threshold:
            log.info("upstream credentials work again after %d failures", self.consecutive_failures)
        self.consecutive_failures = 0
        self.last_failure = None

    def failed(self, cause: str) -> None:
        self.consecutive_failures += 1
        self.last_failure = cause
        self._next_recheck = self._clock() + self.recheck_s
        log.warning("upstream credential fetch failed (%d consecutive): %s", self.consecutive_failures, cause)

    def not_ready_reason(self) -> str | None:
        if self.consecutive_failures < self.threshold:
            return None
        return (
            f"upstream credentials failing: {self.consecutive_failures} consecutive failures, "
            f"last: {self.last_failure}"
        )

    def recheck_due(self) -> bool:
        """Not ready and the last attempt is ``recheck_s`` old: ``/readyz`` should try again."""
        if self.not_ready_reason() is None or self._clock() < self._next_recheck:
            return False
        self._next_recheck = self._clock() + self.recheck_s
        return True
