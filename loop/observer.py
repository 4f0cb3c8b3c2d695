"""Observers of a run: what every event and the terminal are also shown to (metrics, audit logs).

An observer is passed in ``QueryParams.observers``; the ``Run`` shows it each event the consumer
receives, in order, and the terminal once it is known (also for a run closed before it started).
Observers must be quick and must not raise: one that raises is logged and ignored, the run goes on.
``gateway.loop_metrics.LoopMetrics`` is one (the ``loop_*`` Prometheus metrics).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from loop.events import LoopEvent
from loop.transitions import Terminal

log = logging.getLogger("switchyard.loop")


class RunObserver(Protocol):
    def on_event(self, event: LoopEvent) -> None: ...

    def on_terminal(self, terminal: Terminal) -> None: ...


def notify_event(observers: Sequence[RunObserver], event: LoopEvent) -> None:
    for observer in observers:
        try:
            observer.on_event(event)
        except Exception:
            log.exception("run observer %r failed on an event; ignored", observer)


def notify_terminal(observers: Sequence[RunObserver], terminal: Terminal) -> None:
    for observer in observers:
        try:
            observer.on_terminal(terminal)
        except Exception:
            log.exception("run observer %r failed on the terminal; ignored", observer)
