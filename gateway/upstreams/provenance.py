"""Where a conversation's thinking comes from, so a request carries only thinking its target's
provider signed.

A conversation (first message and session id) records the provider kind that answered it last and
how many leading messages came from others (``foreign``, never lowered): a request to that kind
leaves thinking out of those only, to another kind out of all. Kept only when the upstreams are of
several kinds; then a conversation with no record has an unknown origin.

Details: docs/internals/gateway-upstreams.md
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gateway.provider_names import ProviderName
from gateway.providers.base import ClientRequest, Operation
from gateway.upstreams.affinity import Placement
from gateway.upstreams.signatures import message_count, strip_thinking

log = logging.getLogger("switchyard.upstreams")


@dataclass(frozen=True, slots=True)
class History:
    """Where a request's history comes from: ``kind``'s provider (``None``: unknown, every message
    foreign), except its first ``foreign`` messages (of ``count``), whose thinking another provider
    may have signed."""

    kind: ProviderName | None
    foreign: int
    count: int


def history_of(
    client: ClientRequest, origin: Placement | None, *, unknown: bool, assumed: ProviderName
) -> History:
    """The request's history as its conversation's record (``origin``) tells; without one, unknown
    (``unknown``) or ``assumed``'s (the provider the request goes to first)."""
    count = message_count(client) if client.operation is Operation.MESSAGES else 0
    if origin is not None:
        try:
            return History(ProviderName(origin.upstream), origin.foreign, count)
        except ValueError:  # not a provider kind: as unknown
            return History(None, count, count)
    if unknown:
        return History(None, count, count)
    return History(assumed, 0, count)


def for_upstream(client: ClientRequest, kind: ProviderName, name: str, history: History) -> ClientRequest:
    """``client`` for an upstream of ``kind``, without thinking blocks its provider may not have
    signed (logged with their count)."""
    if client.operation is not Operation.MESSAGES:
        return client
    before = history.foreign if kind is history.kind else None  # None: every message
    if before == 0:
        return client
    stripped, removed = strip_thinking(client, before)
    if removed:
        log.info(
            "left out %d thinking block(s) produced on another provider before sending to %s (request %s)",
            removed,
            name,
            client.request_id,
        )
    return stripped


def next_origin(
    history: History, served: ProviderName, origin: Placement | None, now: float, refresh_s: float
) -> Placement | None:
    """The conversation's record after ``served`` answered, or ``None`` when the one it has is
    unchanged and recent (not rewritten on every request)."""
    same = served is history.kind
    foreign = history.foreign if same else max(history.foreign, history.count)
    if origin is None or not same or origin.foreign != foreign or now - origin.at >= refresh_s:
        return Placement(served.value, now, foreign)
    return None
