"""The audit log: one line on logger ``switchyard.audit`` per refusal, cap change and policy reload.

Each line's message is one JSON object with an ``event`` (``policy.refused``, ``policy.cap_changed``,
``policy.reloaded``, ``policy.reload_failed``) and its facts: who (subject, groups), what and why.
Never a key, a token or request content; a model name is cut to 100 characters.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import orjson

from gateway.fleet.principal import Principal

AUDIT_LOGGER: Final = "switchyard.audit"
log = logging.getLogger(AUDIT_LOGGER)


def _emit(level: int, event: str, **facts: Any) -> None:
    log.log(level, "%s", orjson.dumps({"event": event, **facts}).decode())


def refused(principal: Principal, reason: str, request_id: str, **facts: Any) -> None:
    """A policy decision that refused a request (``reason``: model, kill_switch, spend_cap,
    rate_limit, streams, counters_unavailable)."""
    _emit(
        logging.INFO,
        "policy.refused",
        reason=reason,
        subject=principal.subject,
        groups=list(principal.groups),
        request_id=request_id,
        **facts,
    )


def cap_changed(
    actor: Principal, scope: str, owner: str, period: str, old: float | None, new: float | None
) -> None:
    _emit(
        logging.INFO,
        "policy.cap_changed",
        actor=actor.subject,
        scope=scope,
        owner=owner,
        period=period,
        old_usd=old,
        new_usd=new,
    )


def reloaded(source: str, trigger: str, groups: int, users: int) -> None:
    _emit(logging.INFO, "policy.reloaded", source=source, trigger=trigger, groups=groups, users=users)


def reload_failed(source: str, trigger: str, problem: str) -> None:
    _emit(
        logging.WARNING,
        "policy.reload_failed",
        source=source,
        trigger=trigger,
        problem=problem,
        kept="previous policy",
    )
