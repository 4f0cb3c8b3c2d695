"""OTLP JSON export bodies, read without protobuf's JSON parser.

``google.protobuf.json_format`` builds the whole message in Python: about 4 ms for a 7 KB Claude
Code metrics export, on the event loop. Only the shape the intake uses is needed — the ``Sum``
points of metrics, the number of points, log records or spans — so the body is parsed with
``orjson`` and walked here (about 0.1 ms). The OTLP/HTTP specification's JSON encoding: the
protobuf JSON mapping with lowerCamelCase field names (original snake_case names are accepted too,
as protobuf's parser does), 64-bit integers as numbers or ASCII decimal strings, enums as integers (or their
names). A value of the wrong type anywhere on that path is :class:`~gateway.fleet.otlp_decode.Rejected`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final

import orjson

from gateway.fleet.otlp_signals import Reason, Signal

CUMULATIVE: Final = (2, "AGGREGATION_TEMPORALITY_CUMULATIVE")
_POINT_KINDS: Final = (
    "gauge",
    "sum",
    "histogram",
    "exponentialHistogram",
    "exponential_histogram",
    "summary",
)
_CONTAINERS: Final = {
    Signal.METRICS: (
        ("resourceMetrics", "resource_metrics"),
        ("scopeMetrics", "scope_metrics"),
        ("metrics",),
    ),
    Signal.LOGS: (
        ("resourceLogs", "resource_logs"),
        ("scopeLogs", "scope_logs"),
        ("logRecords", "log_records"),
    ),
    Signal.TRACES: (("resourceSpans", "resource_spans"), ("scopeSpans", "scope_spans"), ("spans",)),
}


_DECIMAL: Final = re.compile(r"-?[0-9]{1,20}")  # ASCII digits only (str.isdigit takes "²")
_INT64_MIN: Final = -(2**63)
_UINT64_MAX: Final = 2**64 - 1  # fixed64 times; sfixed64/int64 values are within the signed range


class JsonShapeError(ValueError):
    pass


def loads(body: bytes) -> dict[str, Any]:
    """The body as a JSON object (``JsonShapeError`` otherwise)."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise JsonShapeError(Reason.DECODE.value) from None
    if not isinstance(document, dict):
        raise JsonShapeError("not an object")
    return document


def _field(mapping: dict[str, Any], names: tuple[str, ...], kind: type, default: Any) -> Any:
    for name in names:
        if name in mapping:
            value = mapping[name]
            if value is None:
                return default
            if not isinstance(value, kind):
                raise JsonShapeError(f"{name}: expected {kind.__name__}")
            return value
    return default


def _objects(mapping: dict[str, Any], names: tuple[str, ...]) -> list[dict[str, Any]]:
    items: list[Any] = _field(mapping, names, list, [])
    if not all(isinstance(item, dict) for item in items):
        raise JsonShapeError(f"{names[0]}: expected objects")
    return items


def leaves(document: dict[str, Any], signal: Signal) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(resource object, metric / log record / span object) for every leaf of the export."""
    outer, middle, inner = _CONTAINERS[signal]
    for resource_block in _objects(document, outer):
        resource = _field(resource_block, ("resource",), dict, {})
        for scope_block in _objects(resource_block, middle):
            for leaf in _objects(scope_block, inner):
                yield resource, leaf


def count(document: dict[str, Any], signal: Signal) -> int:
    """Data points, log records or spans (the leaves' shape checked on the way)."""
    if signal is not Signal.METRICS:
        return sum(1 for _ in leaves(document, signal))
    total = 0
    for _, metric in leaves(document, signal):
        for kind in _POINT_KINDS:
            data = _field(metric, (kind,), dict, None)
            if data is not None:
                total += len(_objects(data, ("dataPoints", "data_points")))
                break
    return total


def attributes(owner: dict[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    for pair in _objects(owner, ("attributes",)):
        key = pair.get("key")
        value = pair.get("value")
        if not isinstance(key, str) or not isinstance(value, dict):
            raise JsonShapeError("attributes: expected key and value")
        text = _text(value)
        if text is not None:
            found[key] = text
    return found


def _text(value: dict[str, Any]) -> str | None:
    for name in ("stringValue", "string_value"):
        if name in value:
            text = value[name]
            if not isinstance(text, str):
                raise JsonShapeError("stringValue: expected a string")
            return text
    for name in ("intValue", "int_value"):
        if name in value:
            return str(integer(value[name]))
    for name in ("doubleValue", "double_value"):
        if name in value:
            return str(number(value[name]))
    for name in ("boolValue", "bool_value"):
        if name in value:
            flag = value[name]
            if not isinstance(flag, bool):
                raise JsonShapeError("boolValue: expected a boolean")
            return str(flag)
    return None


def integer(value: Any) -> int:
    """A JSON 64-bit integer (signed or unsigned): a number or an ASCII decimal string."""
    if isinstance(value, bool):
        raise JsonShapeError("expected an integer")
    if isinstance(value, str) and _DECIMAL.fullmatch(value):
        value = int(value)
    if isinstance(value, int) and _INT64_MIN <= value <= _UINT64_MAX:
        return value
    raise JsonShapeError("expected a 64-bit integer")


def number(value: Any) -> float:
    """A JSON double: a number, or a string (protobuf writes ``"NaN"``, ``"Infinity"`` so)."""
    if isinstance(value, bool):
        raise JsonShapeError("expected a number")
    if isinstance(value, int | float | str):
        try:
            return float(value)
        except (ValueError, OverflowError):  # a string that is not a number; an int past a double
            raise JsonShapeError("expected a number") from None
    raise JsonShapeError("expected a number")


def sum_data(metric: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """The metric's name and its ``sum`` object (``None`` for another kind)."""
    name = _field(metric, ("name",), str, "")
    return name, _field(metric, ("sum",), dict, None)


def is_cumulative(data: dict[str, Any]) -> bool:
    return data.get("aggregationTemporality", data.get("aggregation_temporality")) in CUMULATIVE


def data_points(data: dict[str, Any]) -> list[dict[str, Any]]:
    return _objects(data, ("dataPoints", "data_points"))


def point_value(point: dict[str, Any]) -> float:
    for name in ("asDouble", "as_double"):
        if name in point:
            return number(point[name])
    for name in ("asInt", "as_int"):
        if name in point:
            return float(integer(point[name]))
    return 0.0


def start_ns(point: dict[str, Any]) -> int:
    value = point.get("startTimeUnixNano", point.get("start_time_unix_nano", 0))
    return integer(value) if value is not None else 0
