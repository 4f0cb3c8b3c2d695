"""Every status path on the API routes is accounted exactly once (issue 12).

A real gateway in front of the first-party emulator (:mod:`tests.observability.rig`), a real HTTP
client: each case sends one request and checks the ``switchyard.access`` lines, the
``gateway_requests_total`` samples and ``gateway_upstream_errors_total``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson
import pytest

from gateway.app import create_app
from gateway.metrics import GatewayMetrics
from gateway.process import running
from gateway.providers.vertex import VertexProvider
from tests.observability.rig import KEY, SONNET, gateway_rig
from tests.providers.vertex_harness import GATEWAY_KEY as VERTEX_GATEWAY_KEY
from tests.providers.vertex_harness import gateway_settings, predict_requests, vertex_upstream
from tests.support.log_lines import LogLines

Send = Callable[[aiohttp.ClientSession, str], Awaitable[int]]
BODY = {"model": SONNET, "max_tokens": 16, "messages": [{"role": "user", "content": "Hi"}]}
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "content-type": "application/json"}


def _post(path: str = "/v1/messages", body: bytes | None = None, **headers: str) -> Send:
    async def send(session: aiohttp.ClientSession, base: str) -> int:
        data = orjson.dumps(BODY) if body is None else body
        async with session.post(base + path, data=data, headers={**HEADERS, **headers}) as response:
            await response.read()
            return response.status

    return send


async def _wrong_method(session: aiohttp.ClientSession, base: str) -> int:
    async with session.get(base + "/v1/messages", headers=HEADERS) as response:
        return response.status


async def _stream(session: aiohttp.ClientSession, base: str) -> int:
    body = orjson.dumps({**BODY, "stream": True})
    async with session.post(base + "/v1/messages", data=body, headers=HEADERS) as response:
        text = (await response.read()).decode()
        assert "message_stop" in text
        return response.status


async def _leave_mid_stream(session: aiohttp.ClientSession, base: str) -> int:
    """Read the first chunk of a stream the upstream then stalls, and hang up."""
    body = orjson.dumps({**BODY, "stream": True, "max_tokens": 200})
    headers = {**HEADERS, "x-emulator-fault": "stall_after=3:5", "x-emulator-fault-key": "leave"}
    response = await session.post(base + "/v1/messages", data=body, headers=headers)
    assert b"message_start" in await response.content.readany()
    response.close()  # drops the connection
    return response.status


def _closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@dataclass(frozen=True)
class Case:
    send: Send
    status: int
    upstream_error: str | None = None  # the gateway_upstream_errors_total type, if any
    error_type: str | None = None  # the access line's error_type (default: upstream_error)
    stream: str = "false"
    disconnected: bool = False
    env: dict[str, str] = field(default_factory=dict)


CASES = {
    "ok": Case(_post(), 200),
    "ok-stream": Case(_stream, 200, stream="true"),
    "count-tokens": Case(
        _post("/v1/messages/count_tokens", orjson.dumps({"model": SONNET, "messages": BODY["messages"]})), 200
    ),
    "bad-key": Case(_post(**{"x-api-key": "sk-wrong"}), 401, error_type="authentication_error"),
    "invalid-json": Case(_post(body=b"{not json"), 400, error_type="invalid_request_error"),
    "count-tokens-invalid-json": Case(
        _post("/v1/messages/count_tokens", b"[]"), 400, error_type="invalid_request_error"
    ),
    "too-large": Case(
        _post(body=b'{"pad": "' + b"x" * 5000 + b'"}'),
        413,
        error_type="request_too_large",
        env={"GATEWAY_MAX_BODY_BYTES": "4096"},
    ),
    "wrong-method": Case(_wrong_method, 405, error_type="invalid_request_error"),
    "relayed-404": Case(_post(body=orjson.dumps({**BODY, "model": "no-such-model"})), 404, "not_found_error"),
    "relayed-500": Case(
        _post(**{"x-emulator-fault": "fail_first=1:500", "x-emulator-fault-key": "500"}), 500, "api_error"
    ),
    "relayed-529": Case(
        _post(**{"x-emulator-fault": "fail_first=1:529", "x-emulator-fault-key": "529"}),
        529,
        "overloaded_error",
    ),
    "unreachable": Case(_post(), 502, "api_error", env={"ANTHROPIC_BASE_URL": _closed_port()}),
    "client-gone-mid-stream": Case(_leave_mid_stream, 200, stream="true", disconnected=True),
}


def _samples(metrics: GatewayMetrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == name and sample.value
    }


@pytest.mark.parametrize("name", list(CASES))
async def test_every_status_path_is_accounted_once(
    name: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, log_lines: LogLines
) -> None:
    case = CASES[name]
    caplog.set_level(logging.INFO, logger="switchyard.access")
    env = {"GATEWAY_MAX_RETRIES": "0", "GATEWAY_CLIENT_RETRYING_MAX_RETRIES": "0", **case.env}
    async with gateway_rig(tmp_path, env) as rig, aiohttp.ClientSession() as session:
        assert await case.send(session, rig.base_url) == case.status
        for _ in range(200):  # a stream's scope closes when the gateway notices the client left
            if log_lines.access():
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # and nothing more arrives
        (line,) = log_lines.access()
        requests = _samples(rig.metrics, "gateway_requests_total")
        upstream_errors = _samples(rig.metrics, "gateway_upstream_errors_total")
    assert line["status"] == case.status
    assert line["error_type"] == (case.error_type or case.upstream_error)
    assert line["client_disconnected"] is case.disconnected
    assert line["request_id"]
    (labels,) = requests
    assert dict(labels)["status_class"] == f"{case.status // 100}xx"
    assert dict(labels)["stream"] == case.stream
    assert list(requests.values()) == [1.0]
    expected = (
        {}
        if case.upstream_error is None
        else {(("provider", "anthropic"), ("type", case.upstream_error)): 1.0}
    )
    assert upstream_errors == expected


async def test_unknown_model_is_the_clients_error_not_the_upstreams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, log_lines: LogLines
) -> None:
    """On Vertex an unknown model is refused by the gateway itself (a 404 before any upstream
    call): one line and one 4xx sample, and no upstream error."""
    caplog.set_level(logging.INFO, logger="switchyard.access")
    metrics = GatewayMetrics()
    async with vertex_upstream(tmp_path, monkeypatch) as (env, emulator):
        settings = gateway_settings(env)
        app = create_app(settings, VertexProvider(settings), metrics=metrics)
        async with running(app, "127.0.0.1", 0) as server, aiohttp.ClientSession() as session:
            body = orjson.dumps({**BODY, "model": "not-a-claude-model"})
            headers = {**HEADERS, "x-api-key": VERTEX_GATEWAY_KEY}
            async with session.post(server.base_url + "/v1/messages", data=body, headers=headers) as answer:
                assert answer.status == 404
                assert (await answer.json())["error"]["type"] == "not_found_error"
        assert predict_requests(emulator) == []
    (line,) = log_lines.access()
    assert (line["status"], line["error_type"], line["model"]) == (
        404,
        "not_found_error",
        "not-a-claude-model",
    )
    (labels,) = _samples(metrics, "gateway_requests_total")
    assert dict(labels)["status_class"] == "4xx"
    assert _samples(metrics, "gateway_upstream_errors_total") == {}
