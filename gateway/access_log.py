"""One structured JSON log line per request, logger ``switchyard.access``.

Built whole with one ``orjson.dumps`` and appended to the log writer: no ``LogRecord`` or handler
on the request path. Never a credential or header; no prompt or completion content unless
``GATEWAY_LOG_BODIES=1``. Every request gets its line.

Details: docs/internals/gateway.md
"""

from __future__ import annotations

import logging
import time
from typing import Final

import orjson

from gateway.line_writer import iso_ts
from gateway.logging_setup import log_writer
from gateway.outcome import Outcome
from gateway.pricing import Cost
from gateway.providers.base import ClientRequest, Operation

ACCESS_LOGGER: Final = "switchyard.access"
access_log = logging.getLogger(ACCESS_LOGGER)

LOG_BODY_LIMIT: Final = 64 * 1024
LOGGED_NAME_LIMIT: Final = 256  # characters of a model name in a line
LOGGED_FAILURE_LIMIT: Final = 4096  # characters of a failure in a line (its start and its end kept)


def log_request(
    *,
    client: ClientRequest,
    outcome: Outcome,
    provider: str,
    team: str,
    duration_s: float,
    ttft_s: float | None,
    overhead_s: float | None,
    cost: Cost | None,
    log_bodies: bool = False,
) -> None:
    if not access_log.isEnabledFor(logging.INFO):
        return
    record: dict[str, object] = {
        "ts": iso_ts(time.time()),
        "level": "INFO",
        "logger": ACCESS_LOGGER,
        "event": "request",
        "request_id": client.request_id,
        "upstream_request_id": outcome.upstream_request_id,
        "session_id": client.session_id,
        "provider": provider,
        "operation": client.operation.value,
        "model": _name(client.model),
        "served_model": _name(outcome.model_fallback or client.model),
        "upstream_model": None if outcome.upstream_model is None else _name(outcome.upstream_model),
        "stream": client.stream,
        "team": team,
        "status": outcome.status,
        "stop_reason": outcome.stop_reason,
        "error_type": outcome.error_type,
        "failure": None if outcome.failure is None else _failure(outcome.failure),
        "client_disconnected": outcome.client_disconnected,
        "duration_ms": _ms(duration_s),
        "ttft_ms": _ms(ttft_s),
        "overhead_ms": _ms(overhead_s),
        "usage": outcome.usage.as_dict() if client.operation is Operation.MESSAGES else None,
        "cost_usd": round(cost.total, 9) if cost is not None else None,
        "retries": outcome.retries,
        "model_fallback": outcome.model_fallback,
        "nonstreaming_fallback": outcome.nonstreaming_fallback,
        "idle_events": outcome.idle_events,
        "cache_break_reason": outcome.cache_break_reason,
    }
    if outcome.upstream is not None:  # several upstreams: which one answered
        record["upstream"] = outcome.upstream
    if log_bodies:
        _add_body(record, client)
    try:
        line = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError:  # never without its line (audit): the body is what can fail
        record["request_body"] = None
        record["request_body_error"] = "not serialisable"
        line = orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
    log_writer().write(line)


def _name(model: str) -> str:
    """A model name as logged: the client's field is whatever it sent (megabytes, at worst); one
    line must stay short, or the log writer drops other requests' lines behind it."""
    if len(model) <= LOGGED_NAME_LIMIT:
        return model
    return f"{model[:LOGGED_NAME_LIMIT]}... ({len(model)} characters)"


def _failure(text: str) -> str:
    """A failure as logged: gateway-made, but it may quote what the client sent (a cloud upstream's
    'model: <name> is not served...'), so a long one keeps its start and its end."""
    if len(text) <= LOGGED_FAILURE_LIMIT:
        return text
    head, tail = LOGGED_FAILURE_LIMIT * 3 // 4, LOGGED_FAILURE_LIMIT // 4
    return f"{text[:head]}... ({len(text)} characters) ...{text[-tail:]}"


def _add_body(record: dict[str, object], client: ClientRequest) -> None:
    """The client's body as it arrived (decoded): the parsed value when it is short, else its first
    ``LOG_BODY_LIMIT`` bytes as text. Nothing for a request whose body was never parsed."""
    body = client.body
    if not body:
        return
    if len(body) > LOG_BODY_LIMIT:
        record["request_body"] = body[:LOG_BODY_LIMIT].decode(errors="ignore")
        record["request_body_truncated"] = True
    else:
        record["request_body"] = client.payload


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)
