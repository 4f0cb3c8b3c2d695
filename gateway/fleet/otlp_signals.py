"""The OTLP/HTTP signals the intake serves and why an export may go unused: the label values of the
intake's counters (``gateway.fleet.fleet_metrics``), kept apart from the decoding so the metrics
need no protobuf."""

from __future__ import annotations

import enum
from typing import Final


class Signal(enum.StrEnum):
    METRICS = "metrics"
    LOGS = "logs"
    TRACES = "traces"


PATHS: Final = {"/v1/metrics": Signal.METRICS, "/v1/logs": Signal.LOGS, "/v1/traces": Signal.TRACES}


class Reason(enum.StrEnum):
    """Why a body (or part of one) was not used: the ``reason`` label of the reject counter."""

    UNAUTHENTICATED = "unauthenticated"  # no valid bearer (answered 401, not 200)
    TOO_LARGE = "too_large"  # over GATEWAY_TELEMETRY_MAX_BODY_BYTES, before or after decompression
    ENCODING = "encoding"  # a Content-Encoding not decoded, or corrupt compressed data
    CONTENT_TYPE = "content_type"  # neither protobuf nor JSON
    DECODE = "decode"  # not an OTLP export request of this signal
    UNREADABLE = "unreadable"  # the body could not be read (framing, the client left)
