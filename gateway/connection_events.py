"""What the connection layer counts and logs: accepts, gateway-made closes, parser errors, accept errors.

Counting is plain integer arithmetic on the event loop (no Prometheus call on the request path);
:class:`ConnectionCollector` turns the counts into metric families at scrape time. Label values
come from the closed sets below, never from client input.

Logging is one WARNING per event class at most every ``LOG_INTERVAL_S`` seconds, with the number
of further events since the previous line: a slowloris of ten thousand connections is a handful of
lines, never one line (or a traceback) per connection. Nothing a client sent is ever logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Final, Protocol

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

log = logging.getLogger("switchyard.connections")

LOG_INTERVAL_S: Final = 10.0

# why the gateway closed a client connection itself
CLOSE_REASONS: Final = (
    "header_timeout",  # request headers not complete in time (answered 408)
    "body_timeout",  # request body slower than the minimum rate (answered 408)
    "shed_incomplete",  # an incomplete request shed for a newer connection (answered 503)
    "shed_idle",  # an idle keep-alive connection closed to make room
    "refused",  # over the connection cap with nothing to shed (answered 503)
    # GATEWAY_MAX_CONNECTIONS_PER_IP: one client address at its own cap (never the address as a label)
    "ip_shed_incomplete",  # that address's oldest incomplete connection, shed for its newer one (503)
    "ip_shed_idle",  # that address's oldest idle keep-alive connection, closed for its newer one
    "ip_refused",  # the address at its cap with nothing of its own to shed (answered 503)
)
# kinds of malformed HTTP (gateway.http_errors.classify)
PARSE_ERROR_KINDS: Final = (
    "tls_on_plain_http",
    "method",
    "request_line",
    "request_line_too_long",
    "header",
    "header_too_large",
    "too_many_headers",
    "framing",
    "chunked",
    "body",
    "other",
)
ACCEPT_ERRNOS: Final = ("EMFILE", "ENFILE", "ENOBUFS", "ENOMEM", "other")

_CLOSE_MESSAGES: Final = {
    "header_timeout": "closed connection(s): request headers not received in time (408)",
    "body_timeout": "closed connection(s): request body slower than the minimum rate (408)",
    "shed_incomplete": "shed the oldest incomplete connection(s): too many clients still sending (503)",
    "shed_idle": "closed idle keep-alive connection(s) to stay under the connection cap",
    "refused": "refused connection(s): at the connection cap with nothing to shed (503)",
    "ip_shed_incomplete": "shed a client address's oldest incomplete connection(s): "
    "that address is at GATEWAY_MAX_CONNECTIONS_PER_IP (503)",
    "ip_shed_idle": "closed a client address's idle keep-alive connection(s): "
    "that address is at GATEWAY_MAX_CONNECTIONS_PER_IP",
    "ip_refused": "refused connection(s) of a client address at GATEWAY_MAX_CONNECTIONS_PER_IP "
    "with nothing of its own to shed (503)",
}


class OpenCounts(Protocol):
    """What the collector reads from the connection guard at scrape time."""

    @property
    def open(self) -> int: ...
    @property
    def incomplete(self) -> int: ...
    @property
    def idle(self) -> int: ...
    @property
    def max_connections(self) -> int: ...
    @property
    def max_incomplete(self) -> int: ...
    @property
    def max_per_ip(self) -> int: ...


class RateLimitedLog:
    """At most one WARNING per event class every ``interval_s``; later lines count what was skipped."""

    def __init__(
        self,
        logger: logging.Logger = log,
        interval_s: float = LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._clock = clock
        self._next: dict[str, float] = {}
        self._skipped: dict[str, int] = {}

    def warning(self, event: str, message: str) -> bool:
        """Log ``message`` for ``event`` unless one was logged within the interval; ``True`` if logged."""
        now = self._clock()
        if now < self._next.get(event, 0.0):
            self._skipped[event] = self._skipped.get(event, 0) + 1
            return False
        skipped = self._skipped.pop(event, 0)
        self._next[event] = now + self._interval_s
        if skipped:
            self._logger.warning("%s (%d more since the previous line)", message, skipped)
        else:
            self._logger.warning("%s", message)
        return True


class ConnectionEvents:
    """The connection layer's counters and its rate-limited log."""

    def __init__(self, logger: RateLimitedLog | None = None) -> None:
        self.log = logger or RateLimitedLog()
        self.accepted = 0
        self.closed: dict[str, int] = dict.fromkeys(CLOSE_REASONS, 0)
        self.parse_errors: dict[str, int] = dict.fromkeys(PARSE_ERROR_KINDS, 0)
        self.accept_errors: dict[str, int] = dict.fromkeys(ACCEPT_ERRNOS, 0)

    def connection_closed(self, reason: str) -> None:
        self.closed[reason] += 1
        self.log.warning(reason, _CLOSE_MESSAGES[reason])

    def parse_error(self, kind: str, status: int) -> None:
        kind = kind if kind in self.parse_errors else "other"
        self.parse_errors[kind] += 1
        self.log.warning("parse:" + kind, f"malformed HTTP request ({kind.replace('_', ' ')}): answered {status}")

    def accept_error(self, errno_name: str) -> None:
        name = errno_name if errno_name in self.accept_errors else "other"
        self.accept_errors[name] += 1
        self.log.warning(
            "accept:" + name,
            f"accept() failed ({name}): the process is out of file descriptors or memory; "
            "new connections wait until connections close",
        )


class ConnectionCollector:
    """Exposes :class:`ConnectionEvents` and the guard's open counts on a Prometheus registry."""

    def __init__(self, events: ConnectionEvents, counts: OpenCounts) -> None:
        self._events = events
        self._counts = counts

    def collect(self) -> Iterable[Metric]:
        events, counts = self._events, self._counts
        accepted = CounterMetricFamily(
            "gateway_connections_accepted", "Client connections accepted by the listener."
        )
        accepted.add_metric([], events.accepted)
        closed = CounterMetricFamily(
            "gateway_connections_closed",
            "Client connections the gateway closed itself (timeouts, shedding), by reason.",
            labels=["reason"],
        )
        for reason, count in events.closed.items():
            closed.add_metric([reason], count)
        parse = CounterMetricFamily(
            "gateway_http_parse_errors",
            "Malformed HTTP requests answered with a JSON error, by kind.",
            labels=["kind"],
        )
        for kind, count in events.parse_errors.items():
            parse.add_metric([kind], count)
        accept = CounterMetricFamily(
            "gateway_accept_errors", "Failed accept() calls on the listener, by errno.", labels=["errno"]
        )
        for name, count in events.accept_errors.items():
            accept.add_metric([name], count)
        open_ = GaugeMetricFamily(
            "gateway_connections_open",
            "Open client connections: still sending a request (incomplete), idle keep-alive, or busy.",
            labels=["state"],
        )
        incomplete, idle = counts.incomplete, counts.idle
        open_.add_metric(["incomplete"], incomplete)
        open_.add_metric(["idle"], idle)
        open_.add_metric(["busy"], max(counts.open - incomplete - idle, 0))
        limits = GaugeMetricFamily(
            "gateway_connections_limit",
            "The connection caps in force (per_ip: per client address, 0 when unset).",
            labels=["kind"],
        )
        limits.add_metric(["open"], counts.max_connections)
        limits.add_metric(["incomplete"], counts.max_incomplete)
        limits.add_metric(["per_ip"], counts.max_per_ip)  # 0: no per-address cap
        return [accepted, closed, parse, accept, open_, limits]


def register(registry: CollectorRegistry | None, collector: ConnectionCollector) -> Callable[[], None]:
    """Register ``collector`` (when there is a registry); returns the function that unregisters it."""
    if registry is None:
        return lambda: None
    try:
        registry.register(collector)
    except ValueError:  # another server on the same registry already exposes its connections
        return lambda: None
    return lambda: registry.unregister(collector)
