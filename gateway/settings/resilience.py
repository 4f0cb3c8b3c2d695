"""Resilience settings: stream idle watchdog and pings, non-streaming fallback, retries, model fallback."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from gateway.settings.section import Flag, OptionalText, Section


class ResilienceSettings(Section):
    """What the gateway does when the upstream is slow, silent or failing."""

    title: ClassVar[str] = "Resilience"

    stream_idle_warning_s: float = Field(45.0, alias="GATEWAY_STREAM_IDLE_WARNING_S", gt=0)
    """Seconds without an upstream data event before a stream is logged as idle."""
    stream_idle_timeout_s: float = Field(90.0, alias="GATEWAY_STREAM_IDLE_TIMEOUT_S", gt=0)
    """Seconds without an upstream data event before a stream is aborted."""
    downstream_ping_s: float = Field(15.0, alias="GATEWAY_DOWNSTREAM_PING_S", gt=0)
    """While the upstream is silent, send the client `event: ping` this often, seconds."""
    nonstreaming_fallback: Flag = Field(True, alias="GATEWAY_NONSTREAMING_FALLBACK")
    """Retry a stream that failed before any content once as a non-streaming request."""
    max_retries: int = Field(10, alias="GATEWAY_MAX_RETRIES", ge=0)
    """Retries of 408/409/429/5xx/529, connection errors and timeouts, for a client that does not retry itself."""
    max_retry_delay_s: float = Field(60.0, alias="GATEWAY_MAX_RETRY_DELAY_S", gt=0)
    """Cap on one retry wait, seconds."""
    request_deadline_s: float = Field(600.0, alias="GATEWAY_REQUEST_DEADLINE_S", gt=0)
    """No retry starts this many seconds after the request arrived."""
    fallback_model: OptionalText = Field(None, alias="GATEWAY_FALLBACK_MODEL")
    """Model to switch to after GATEWAY_FALLBACK_AFTER_OVERLOADS consecutive 529s."""
    fallback_after_overloads: int = Field(3, alias="GATEWAY_FALLBACK_AFTER_OVERLOADS", ge=1)
    """Consecutive 529s before switching to GATEWAY_FALLBACK_MODEL."""
    # the retry budget for clients that retry themselves (gateway.retry_budget)
    client_retrying_max_retries: int = Field(1, alias="GATEWAY_CLIENT_RETRYING_MAX_RETRIES", ge=0)
    """Retries under the first attempt of a client that retries itself (it sends
    x-stainless-retry-count, or repeats a request that just failed); its n-th retry gets this minus n."""
    client_retry_limit: int = Field(10, alias="GATEWAY_CLIENT_RETRY_LIMIT", ge=0)
    """After a client's this-many-th retry, its final retryable error says x-should-retry: false."""
    client_retry_window_s: float = Field(300.0, alias="GATEWAY_CLIENT_RETRY_WINDOW_S", ge=0)
    """Seconds a request answered with a retryable error is remembered (as a hash) to recognise its
    client's retries; 0: by x-stainless-retry-count alone."""
