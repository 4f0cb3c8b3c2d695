"""The idle watchdog of one relayed stream, as a small pure state machine.

TCP connections die silently (a crashed server, a load balancer, a corporate proxy) and SDK
timeouts stop watching once HTTP 200 arrives. The relay asks the watchdog when it next needs to
wake up and what to do then:

* ``warn``: no upstream *data* event for ``warn_after`` seconds (pings and keep-alive bytes do not
  count: a stalled model behind a pinging proxy is still stalled);
* ``abort``: no data event for ``abort_after`` seconds;
* ``ping``: nothing written to the client for ``ping_every`` seconds, so the client's own proxy
  does not cut an idle connection.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class IdleAction(enum.Enum):
    PING = "ping"
    WARN = "warning"
    ABORT = "abort"


@dataclass(slots=True)
class IdleWatchdog:
    warn_after: float
    abort_after: float
    ping_every: float
    last_data: float
    last_write: float
    warned: bool = False

    def data_received(self, now: float) -> None:
        self.last_data = now
        self.warned = False

    def wrote(self, now: float) -> None:
        self.last_write = now

    def next_deadline(self) -> float:
        deadline = min(self.last_data + self.abort_after, self.last_write + self.ping_every)
        if not self.warned:
            deadline = min(deadline, self.last_data + self.warn_after)
        return deadline

    def due(self, now: float) -> list[IdleAction]:
        """What is due at ``now``, most severe first (an abort makes the rest moot).

        Compared with the sums ``next_deadline`` returns (not ``now - last >= after``, which can
        round the other way): at ``now == next_deadline()`` something is always due, so a reader
        woken at its deadline never finds nothing to do and a zero wait to do it again.
        """
        if now >= self.last_data + self.abort_after:
            return [IdleAction.ABORT]
        actions: list[IdleAction] = []
        if not self.warned and now >= self.last_data + self.warn_after:
            self.warned = True
            actions.append(IdleAction.WARN)
        if now >= self.last_write + self.ping_every:
            actions.append(IdleAction.PING)
        return actions
