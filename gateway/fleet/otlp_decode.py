"""OTLP/HTTP request bodies (``/v1/metrics``, ``/v1/logs``, ``/v1/traces``): decoding and the answer.

Protobuf or OTLP JSON; anything else is a :class:`Rejected` with a fixed reason (a metric label),
still answered 200. Only ``Sum`` data points of metrics come out.

Details: docs/internals/gateway-fleet.md
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from google.protobuf import json_format
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality

from gateway.fleet import otlp_json
from gateway.fleet.otlp_signals import Reason, Signal

PROTOBUF: Final = "application/x-protobuf"
JSON: Final = "application/json"


_REQUESTS: Final[dict[Signal, type[Message]]] = {
    Signal.METRICS: ExportMetricsServiceRequest,
    Signal.LOGS: ExportLogsServiceRequest,
    Signal.TRACES: ExportTraceServiceRequest,
}


class Rejected(Exception):
    def __init__(self, reason: Reason) -> None:
        super().__init__(reason.value)
        self.reason = reason


def media_type(content_type: str | None) -> str | None:
    """``PROTOBUF`` or ``JSON`` for a Content-Type header (parameters ignored), else ``None``."""
    if not content_type:
        return None
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind in (PROTOBUF, "application/protobuf"):
        return PROTOBUF
    if kind == JSON:
        return JSON
    return None


@dataclass(frozen=True, slots=True)
class Export:
    """One decoded export request: how many points, log records or spans it holds, and (metrics)
    its ``Sum`` points, read on demand."""

    signal: Signal
    items: int
    _message: Message | None = None  # protobuf
    _document: dict[str, Any] | None = None  # OTLP JSON, as orjson parsed it

    def sum_points(self) -> Iterator[SumPoint | None]:
        if self._message is not None:
            assert isinstance(self._message, ExportMetricsServiceRequest)
            return sum_points(self._message)
        assert self._document is not None
        return _json_sum_points(self._document)


def decode(signal: Signal, media: str, body: bytes) -> Export:
    """The export request in ``body``; :class:`Rejected` (``decode``) when it is not one.

    Protobuf is parsed into the ``opentelemetry-proto`` message; OTLP JSON is read with ``orjson``
    and walked (``gateway.fleet.otlp_json``: protobuf's own JSON parser costs ~40 times more),
    its ``Sum`` points checked as they are read."""
    if media == JSON:
        try:
            document = otlp_json.loads(body)
            export = Export(signal, otlp_json.count(document, signal), _document=document)
            if signal is Signal.METRICS:
                for _ in export.sum_points():  # check the shape now: a bad body is rejected whole
                    pass
        except (ValueError, OverflowError, RecursionError):  # JsonShapeError is a ValueError
            raise Rejected(Reason.DECODE) from None
        return export
    message = _REQUESTS[signal]()
    try:
        message.ParseFromString(body)
    except Exception:  # DecodeError, and upb's nesting limit
        raise Rejected(Reason.DECODE) from None
    return Export(signal, items(signal, message), _message=message)


def _json_sum_points(document: dict[str, Any]) -> Iterator[SumPoint | None]:
    resources: dict[int, tuple[tuple[str, str], ...]] = {}
    for resource, metric in otlp_json.leaves(document, Signal.METRICS):
        key = id(resource)
        if key not in resources:
            resources[key] = tuple(sorted(otlp_json.attributes(resource).items()))
        name, data = otlp_json.sum_data(metric)
        if data is None:
            continue  # counted by otlp_json.count; not a Sum
        cumulative = otlp_json.is_cumulative(data)
        for point in otlp_json.data_points(data):
            yield SumPoint(
                name,
                otlp_json.attributes(point),
                otlp_json.point_value(point),
                cumulative,
                otlp_json.start_ns(point),
                resources[key],
            )


def items(signal: Signal, message: Message) -> int:
    """Data points, log records or spans in an export request."""
    if isinstance(message, ExportMetricsServiceRequest):
        return sum(
            len(getattr(metric, metric.WhichOneof("data")).data_points)
            for resource in message.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.WhichOneof("data") is not None
        )
    if isinstance(message, ExportLogsServiceRequest):
        return sum(len(scope.log_records) for r in message.resource_logs for scope in r.scope_logs)
    assert isinstance(message, ExportTraceServiceRequest), signal
    return sum(len(scope.spans) for r in message.resource_spans for scope in r.scope_spans)


def response(signal: Signal, media: str | None, rejected: int = 0, error: str = "") -> tuple[bytes, str]:
    """The body and content type of the answer: an empty response, or a ``partial_success``."""
    answer: Message
    if signal is Signal.METRICS:
        answer = ExportMetricsServiceResponse()
        if rejected or error:
            answer.partial_success.rejected_data_points = rejected
            answer.partial_success.error_message = error
    elif signal is Signal.LOGS:
        answer = ExportLogsServiceResponse()
        if rejected or error:
            answer.partial_success.rejected_log_records = rejected
            answer.partial_success.error_message = error
    else:
        answer = ExportTraceServiceResponse()
        if rejected or error:
            answer.partial_success.rejected_spans = rejected
            answer.partial_success.error_message = error
    if media == PROTOBUF:
        return answer.SerializeToString(), PROTOBUF
    return json_format.MessageToJson(answer, indent=None).encode(), JSON


@dataclass(frozen=True, slots=True)
class SumPoint:
    """One data point of a ``Sum`` metric."""

    metric: str
    attributes: dict[str, str]
    value: float
    cumulative: bool  # else delta (an unspecified temporality is read as delta)
    start_ns: int
    resource: tuple[tuple[str, str], ...]  # the resource's attributes, sorted (identifies a stream)


def sum_points(message: ExportMetricsServiceRequest) -> Iterator[SumPoint | None]:
    """Every ``Sum`` data point; ``None`` for each point of another kind (gauge, histogram...)."""
    for resource_metrics in message.resource_metrics:
        resource = tuple(sorted(_attributes(resource_metrics.resource.attributes).items()))
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                kind = metric.WhichOneof("data")
                if kind != "sum":
                    if kind is not None:
                        yield from (None for _ in getattr(metric, kind).data_points)
                    continue
                cumulative = metric.sum.aggregation_temporality == AggregationTemporality.Value(
                    "AGGREGATION_TEMPORALITY_CUMULATIVE"
                )
                for point in metric.sum.data_points:
                    value = (
                        point.as_double if point.WhichOneof("value") == "as_double" else float(point.as_int)
                    )
                    yield SumPoint(
                        metric.name,
                        _attributes(point.attributes),
                        value,
                        cumulative,
                        point.start_time_unix_nano,
                        resource,
                    )


def _attributes(pairs: list[KeyValue]) -> dict[str, str]:
    found: dict[str, str] = {}
    for pair in pairs:
        text = _text(pair.value)
        if text is not None:
            found[pair.key] = text
    return found


def _text(value: AnyValue) -> str | None:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind in ("int_value", "double_value", "bool_value"):
        return str(getattr(value, kind))
    return None  # arrays, maps, bytes: no Claude Code attribute is one
