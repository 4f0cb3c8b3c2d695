"""Why an upstream stream could not be relayed to its end (:class:`StreamFailure`).

Raised by the stream guard (a cut, a stall, an answer that is no stream: ``gateway.streaming.guard``)
and by the observer (``gateway.streaming.usage``: an event the SDKs would fail to parse); the relay
recovers from it (the non-streaming fallback, another upstream, or an error event after content).
"""

from __future__ import annotations


class StreamFailure(Exception):
    """The upstream stream broke, stalled or was not a stream; ``reason`` says which."""

    def __init__(
        self, reason: str, error_type: str = "api_error", status: int = 502, *, fallback: bool = True
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error_type = error_type
        self.status = status
        self.fallback = fallback  # a non-streaming retry may help (not for a request the upstream refused)

    @property
    def event_error_type(self) -> str:
        """The type of the SSE ``error`` event that ends a stream cut after content (a timeout
        there is reported as ``api_error``, which every SDK treats as retryable)."""
        return self.error_type if self.error_type != "timeout_error" else "api_error"


def malformed_event(name: str) -> StreamFailure:
    """A ``message_start`` or ``message_delta`` whose data is not a JSON object (the SDKs parse
    them: relayed, it failed the client's stream with a JSON or attribute error, not an API one)."""
    return StreamFailure(f"upstream sent a {name} event that is not a JSON object")
