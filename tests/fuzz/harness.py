"""What every fuzz case checks, and the tally that proves how many cases ran.

A case is one request sent as raw bytes to a real gateway (``gateway.process.running``) in front of
the first-party emulator. Its answer must be:

* never a 5xx (the gateway makes none for client input; the emulator answers 4xx for bad bodies,
  so no upstream 5xx is relayed either);
* for any non-2xx, an Anthropic-shaped JSON error (``{"type":"error","error":{type,message}}``),
  made by the gateway or relayed from the upstream;
* for a 2xx, a JSON answer, for a stream SSE that ends with ``message_stop`` (for ``/metrics``,
  the Prometheus exposition);
* never an echo of the key the client presented.

After a batch the checker asserts the logs stayed clean (no traceback, nothing at ERROR) and that
every API request left exactly one access line, then that the process still serves.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import orjson
import pytest
from hypothesis import HealthCheck, settings

from tests.support.error_shape import anthropic_error
from tests.support.gateway_stack import CLIENT_KEY, GatewayStack
from tests.support.log_lines import LogLines
from tests.support.raw_http import RawConnection, RawResponse, request_bytes
from tests.support.waiting import wait_until

API_PATHS = ("/v1/messages", "/v1/messages/count_tokens")
TEAM_KEY = "sk-gw-fuzz-team-key"  # a second key, in the keys file (team fuzz-team)
# requests per hypothesis example: the engine's own cost per example is shared by a few requests
BATCH = 3


def budget(cases: int) -> settings:
    """Seeded (``derandomize``), ``cases`` examples, no deadline (the machine is shared), no example
    database: the same cases on every run. A checker fixture serves all of a test's examples."""
    return settings(
        max_examples=cases,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
        ],
    )


GOOD_BODY = b'{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}'


@dataclass
class Tally:
    """Cases sent per test and overall, and their statuses (for the report at the end)."""

    cases: int = 0
    api_requests: int = 0  # requests to /v1/messages*: each must leave one access line
    upstream_answers: int = 0  # answers relayed from the emulator (it sets request-id)
    statuses: dict[int, int] = field(default_factory=dict)


@dataclass
class Checker:
    stack: GatewayStack
    log_lines: LogLines
    caplog: pytest.LogCaptureFixture
    tally: Tally = field(default_factory=Tally)
    _connection: RawConnection | None = None

    @property
    def connection(self) -> RawConnection:
        if self._connection is None:
            self._connection = RawConnection("127.0.0.1", self.stack.port)
        return self._connection

    def send(
        self,
        raw: bytes,
        *,
        api: bool,
        stream: bool = False,
        secrets: Iterable[bytes] = (),
        head: bool = False,
    ) -> RawResponse:
        """Send one case (a whole request as bytes) and check its answer."""
        response = self.connection.send(raw, head=head)
        self.tally.cases += 1
        self.tally.api_requests += api
        self.tally.statuses[response.status] = self.tally.statuses.get(response.status, 0) + 1
        self.tally.upstream_answers += (response.header("request-id") or "").startswith("req_emu_")
        check_answer(response, stream=stream, head=head)
        for secret in secrets:
            if len(secret) >= 8:
                assert secret not in response.body, "the presented key came back in the answer"
        return response

    def post(
        self,
        path: str,
        body: bytes,
        headers: Iterable[tuple[str | bytes, str | bytes]],
        *,
        stream: bool = False,
        secrets: Iterable[bytes] = (),
    ) -> RawResponse:
        return self.send(
            request_bytes("POST", path, headers, body), api=path in API_PATHS, stream=stream, secrets=secrets
        )

    def finish(self, *, minimum_cases: int) -> None:
        """The batch's logs are clean, every API request has its access line, the process serves."""
        tally = self.tally
        print(
            f"{tally.cases} cases ({tally.upstream_answers} answered upstream): {dict(sorted(tally.statuses.items()))}"
        )
        assert self.tally.cases >= minimum_cases, f"only {self.tally.cases} cases ran"
        expected = self.tally.api_requests
        wait_until(lambda: len(self.log_lines.access()) >= expected)
        assert len(self.log_lines.access()) == expected
        text = self.log_lines.text()
        assert "Traceback" not in text and "Traceback" not in self.caplog.text
        loud = [r for r in self.caplog.records if r.levelno >= logging.ERROR or r.exc_info]
        assert not loud, [r.getMessage()[:300] for r in loud[:5]]
        assert_healthy(self.connection)
        # its access line too, before the next test's log capture starts
        wait_until(lambda: len(self.log_lines.access()) == expected + 1)
        if self._connection is not None:
            self._connection.close()


def check_answer(response: RawResponse, *, stream: bool, head: bool = False) -> None:
    status = response.status
    assert status < 500, f"{status}: {response.body[:300]!r}"
    if head:
        return
    if status >= 300:
        anthropic_error(response)
        return
    content_type = response.header("content-type") or ""
    if content_type.startswith("text/event-stream"):
        assert stream, "an SSE answer to a request that did not ask for one"
        assert b"event: message_stop" in response.body, response.body[-300:]
        return
    if content_type.startswith("text/plain; version="):  # /metrics: the Prometheus exposition
        assert b"# TYPE" in response.body
        return
    assert content_type.startswith("application/json"), (status, content_type)
    orjson.loads(response.body)


def assert_healthy(connection: RawConnection) -> None:
    health = connection.send(request_bytes("GET", "/healthz"))
    assert (health.status, health.json()) == (200, {"status": "ok"})
    normal = connection.send(request_bytes("POST", "/v1/messages", [("x-api-key", CLIENT_KEY)], GOOD_BODY))
    assert normal.status == 200, normal.body[:300]
    assert normal.json()["type"] == "message"
