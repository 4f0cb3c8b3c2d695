"""What happened to one request (status, usage, errors, timings): filled in along the request
path, read once when its accounting closes (metrics, the access log, the fleet policy)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.streaming.usage import Usage


@dataclass(slots=True)
class Outcome:
    """What happened to one request, for metrics and the access log."""

    status: int = 0
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
    error_type: str | None = None
    first_content_at: float | None = None
    upstream_request_id: str | None = None
    client_disconnected: bool = False
    retries: int = 0
    model_fallback: str | None = None
    upstream_model: str | None = None  # the model id the answering attempt sent upstream (mapped)
    nonstreaming_fallback: bool = False
    idle_events: list[str] = field(default_factory=list)
    failure: str | None = None
    # gateway overhead (see ``metrics.overhead_seconds``): clock() readings on the request's clock
    upstream_started_at: float | None = None  # the first upstream attempt is about to be sent
    upstream_done_at: float | None = None  # the upstream's answer has been completely received
    relay_busy_s: float = 0.0  # time the stream relay spent parsing upstream chunks
    cache_break_reason: str | None = None  # set by the cache-break detector, for the access log
    upstream: str | None = None  # several upstreams: the named upstream that answered (access log)
