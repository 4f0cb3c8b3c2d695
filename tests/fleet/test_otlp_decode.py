"""OTLP JSON is read by the intake's own walker (``gateway.fleet.otlp_json``) and protobuf by
``opentelemetry-proto``: for the same SDK export both give the same points and counts, protobuf's
own JSON parser agrees on what is valid, and malformed shapes are rejected."""

from __future__ import annotations

import orjson
import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common._internal.metrics_encoder import encode_metrics
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from gateway.fleet.otlp_decode import JSON, PROTOBUF, Rejected, decode
from gateway.fleet.otlp_signals import Reason, Signal
from tests.fleet.otlp_client import Activity, Recorder


@pytest.mark.parametrize("cumulative", [False, True])
def test_json_and_protobuf_give_the_same_points(cumulative: bool) -> None:
    recorder = Recorder(cumulative=cumulative)
    recorder.record(Activity())
    request = encode_metrics(recorder.record(Activity(sessions=2)))
    from_protobuf = decode(Signal.METRICS, PROTOBUF, request.SerializeToString())
    camel = json_format.MessageToJson(request, use_integers_for_enums=True).encode()
    snake = json_format.MessageToJson(request, preserving_proto_field_name=True).encode()  # enum names
    for body in (camel, snake):
        from_json = decode(Signal.METRICS, JSON, body)
        assert from_json.items == from_protobuf.items > 0
        assert list(from_json.sum_points()) == list(from_protobuf.sum_points())
    points = [p for p in from_protobuf.sum_points() if p is not None]
    assert {p.cumulative for p in points} == {cumulative}
    assert b'"startTimeUnixNano": "' in camel  # 64-bit integers as strings, read as integers
    sessions = next(p for p in points if p.metric == "claude_code.session.count")
    assert sessions.value == (3 if cumulative else 2) and sessions.attributes["session.id"] == "session-1"


def test_numbers_as_numbers_or_strings() -> None:
    document = {
        "resourceMetrics": [{
            "resource": {"attributes": [{"key": "n", "value": {"intValue": 7}}]},
            "scopeMetrics": [{"metrics": [{
                "name": "claude_code.cost.usage",
                "sum": {"aggregationTemporality": 1, "isMonotonic": True, "dataPoints": [
                    {"asDouble": "0.5", "attributes": [{"key": "model", "value": {"stringValue": "m"}}]},
                    {"asInt": "3", "startTimeUnixNano": 12},
                    {"asDouble": 1},
                ]},
            }, {"name": "g", "gauge": {"dataPoints": [{"asDouble": 1.0}]}}]}],
        }]
    }  # fmt: skip
    body = orjson.dumps(document)
    json_format.Parse(body.decode(), ExportMetricsServiceRequest())  # valid for protobuf's parser too
    export = decode(Signal.METRICS, JSON, body)
    assert export.items == 4
    points = list(export.sum_points())
    assert [p.value for p in points if p is not None] == [0.5, 3.0, 1.0]
    assert points[0] is not None and points[0].resource == (("n", "7"),)
    assert points[1] is not None and points[1].start_ns == 12


@pytest.mark.parametrize(
    "document",
    [
        {"resourceMetrics": 5},
        {"resourceMetrics": [{"scopeMetrics": [{"metrics": [7]}]}]},
        {"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": 3}]}]}]},
        {"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "x", "sum": {"dataPoints": [
            {"asDouble": "lots"}]}}]}]}]},
        {"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "x", "sum": {"dataPoints": [
            {"asInt": 1, "attributes": [{"key": "k", "value": {"intValue": "12x"}}]}]}}]}]}]},
        {"resourceLogs": [{"scopeLogs": {"logRecords": []}}]},
    ],
)  # fmt: skip
def test_malformed_json_is_rejected(document: object) -> None:
    signal = Signal.LOGS if "resourceLogs" in str(document) else Signal.METRICS
    body = orjson.dumps(document)
    with pytest.raises(Rejected) as info:
        decode(signal, JSON, body)
    assert info.value.reason is Reason.DECODE
    with pytest.raises(json_format.ParseError):  # protobuf's own parser refuses them too
        json_format.Parse(
            body.decode(), ExportMetricsServiceRequest() if signal is Signal.METRICS else _logs()
        )


def _points(*points: dict[str, object]) -> bytes:
    metric = {"name": "claude_code.cost.usage", "sum": {"dataPoints": list(points)}}
    return orjson.dumps({"resourceMetrics": [{"scopeMetrics": [{"metrics": [metric]}]}]})


@pytest.mark.parametrize(
    "point",
    [
        {"asInt": "²"},  # str.isdigit() says yes, int() says no
        {"asInt": "--5"},
        {"asInt": "9" * 5000},  # past int()'s digit limit
        {"asInt": "1" + "0" * 400},  # past a double
        {"asInt": str(2**64)},  # past 64 bits
        {"asInt": 1, "startTimeUnixNano": "-" * 30},
        {"asInt": 1, "attributes": [{"key": "k", "value": {"intValue": "9" * 5000}}]},
    ],
)
def test_integers_are_64_bit_ascii_decimals(point: dict[str, object]) -> None:
    with pytest.raises(Rejected) as info:
        decode(Signal.METRICS, JSON, _points(point))
    assert info.value.reason is Reason.DECODE
    with pytest.raises(json_format.ParseError):  # protobuf's own parser refuses them too
        json_format.Parse(_points(point).decode(), ExportMetricsServiceRequest())


def test_integers_at_the_64_bit_bounds_are_read() -> None:
    body = _points({"asInt": str(-(2**63))}, {"asInt": 5, "startTimeUnixNano": str(2**64 - 1)})
    points = [p for p in decode(Signal.METRICS, JSON, body).sum_points() if p is not None]
    assert [p.value for p in points] == [float(-(2**63)), 5.0] and points[1].start_ns == 2**64 - 1


def _logs() -> object:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    return ExportLogsServiceRequest()


def test_an_export_is_an_object() -> None:
    with pytest.raises(Rejected):
        decode(Signal.METRICS, JSON, b"[]")  # (protobuf's parser lets this one through)


def test_deep_nesting_is_rejected_not_a_crash() -> None:
    body = b'{"resourceMetrics": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    with pytest.raises(Rejected):
        decode(Signal.METRICS, JSON, body)
    with pytest.raises(Rejected):
        decode(Signal.METRICS, PROTOBUF, b"\x0a\xff\xff\xff\xff\x0f")  # a length past the end
