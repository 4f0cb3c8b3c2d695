"""One JSON access-log line per request: the fields, the session id, and never a credential or
any prompt or completion content (unless GATEWAY_LOG_BODIES=1, and then still no credential)."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any

import anthropic
import orjson
import pytest

from gateway.line_writer import iso_ts
from gateway.logging_setup import JsonFormatter
from gateway.session_ids import session_id_of
from tests.observability.rig import (
    HAIKU,
    KEY,
    SONNET,
    TEAM,
    TEAM_KEY,
    UPSTREAM_KEY,
    expected_cost,
    gateway_rig,
)
from tests.support.import_graph import REPO
from tests.support.log_lines import LogLines

PROMPT = "Tell me about the lighthouse keeper's secret recipe."
SESSION = "5f0c7a52-8d4e-4c61-a3f1-0b9e2d7c4a18"
WRONG_KEY = "sk-gw-not-a-valid-key-91ab"


CLIENT_SIDE = ("anthropic", "httpx", "httpcore", "emulators")  # the test's client and upstream


def everything_logged(caplog: pytest.LogCaptureFixture, log_lines: LogLines) -> str:
    """Every line the gateway's process side logged (any logger, any level), as it would be written:
    the access lines as the log writer wrote them, the other records through the JSON formatter."""
    formatter = JsonFormatter()
    records = [formatter.format(r) for r in caplog.records if not r.name.startswith(CLIENT_SIDE)]
    return "\n".join([*records, log_lines.text()])


async def _traffic(tmp_path: Path, **env: str) -> tuple[list[Any], list[str]]:
    """Requests carrying keys and a session; returns (responses, x-client-request-ids)."""
    settings = {"GATEWAY_FALLBACK_MODEL": HAIKU, "GATEWAY_FALLBACK_AFTER_OVERLOADS": "2", **env}
    responses: list[Any] = []
    ids: list[str] = []
    async with gateway_rig(tmp_path, settings) as rig:
        bearer = anthropic.AsyncAnthropic(
            auth_token=TEAM_KEY,
            base_url=rig.base_url,
            max_retries=0,
            default_headers={"X-Claude-Code-Session-Id": SESSION},
        )
        raw = await bearer.messages.with_raw_response.create(
            model=SONNET, max_tokens=32, messages=[{"role": "user", "content": PROMPT}]
        )
        responses.append(await raw.parse())
        ids.append(raw.headers["x-client-request-id"])
        faulty = rig.client(KEY, **{"x-emulator-fault": "fail_first=2:529", "x-emulator-fault-key": "log"})
        raw = await faulty.messages.with_raw_response.create(
            model=SONNET, max_tokens=32, messages=[{"role": "user", "content": PROMPT}]
        )
        responses.append(await raw.parse())
        ids.append(raw.headers["x-client-request-id"])
        with pytest.raises(anthropic.AuthenticationError):
            await rig.client(WRONG_KEY).messages.create(model=SONNET, max_tokens=8, messages=[])
    return responses, ids


async def test_one_line_per_request_without_credentials_or_content(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, log_lines: LogLines
) -> None:
    caplog.set_level(logging.DEBUG)
    responses, ids = await _traffic(tmp_path)
    first, second, rejected = log_lines.access()  # the 401 has its line too (issue 12)
    assert (rejected["status"], rejected["error_type"], rejected["team"], rejected["model"]) == (
        401,
        "authentication_error",
        "",
        "",
    )
    assert first["event"] == "request" and first["request_id"] == ids[0]
    assert first["upstream_request_id"] and first["session_id"] == SESSION
    assert (first["provider"], first["operation"], first["model"], first["team"]) == (
        "anthropic",
        "messages",
        SONNET,
        TEAM,
    )
    assert (first["status"], first["stream"], first["stop_reason"], first["retries"]) == (
        200,
        False,
        "end_turn",
        0,
    )
    assert first["usage"]["output_tokens"] == responses[0].usage.output_tokens
    assert first["cost_usd"] == pytest.approx(
        expected_cost("anthropic", SONNET, responses[0].usage), abs=1e-9
    )
    assert first["duration_ms"] > 0 and first["cache_break_reason"] is None
    assert "request_body" not in first
    assert (second["retries"], second["model_fallback"], second["served_model"]) == (2, HAIKU, HAIKU)
    assert (first["upstream_model"], second["upstream_model"], rejected["upstream_model"]) == (SONNET, HAIKU, None)
    assert second["session_id"] is None and second["team"] == "default"
    assert second["cost_usd"] == pytest.approx(
        expected_cost("anthropic", HAIKU, responses[1].usage), abs=1e-9
    )

    logged = everything_logged(caplog, log_lines)
    assert "retrying upstream request" in logged and '"event":"request"' in logged  # not vacuous
    for secret in (KEY, TEAM_KEY, UPSTREAM_KEY, WRONG_KEY):
        assert secret not in logged
    assert PROMPT not in logged and "lighthouse" not in logged
    completion = responses[0].content[0].text
    assert completion and completion not in logged


async def test_a_mapped_model_is_logged_priced_and_counted_as_the_model_that_answered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, log_lines: LogLines
) -> None:
    """``GATEWAY_MODEL_MAP={"fast": HAIKU}``: a request for ``fast`` was priced at the ``other``
    tier (15 times Haiku's input price) and counted under ``model="other"``."""
    caplog.set_level(logging.INFO, logger="switchyard.access")
    async with gateway_rig(tmp_path, {"GATEWAY_MODEL_MAP": f'{{"fast": "{HAIKU}"}}'}) as rig:
        response = await rig.client(TEAM_KEY).messages.create(
            model="fast", max_tokens=32, messages=[{"role": "user", "content": PROMPT}]
        )
        labels = {"provider": "anthropic", "team": TEAM}
        spent = rig.value("gateway_cost_usd_total", **labels, model=HAIKU)
        other = rig.value("gateway_cost_usd_total", **labels, model="other")
    (line,) = log_lines.access()
    assert (line["model"], line["served_model"], line["upstream_model"]) == ("fast", "fast", HAIKU)
    want = expected_cost("anthropic", HAIKU, response.usage)
    assert want > 0 and line["cost_usd"] == pytest.approx(want, abs=1e-9)
    assert spent == pytest.approx(want, abs=1e-9) and other == 0.0


async def test_log_bodies_adds_the_request_but_still_no_credential(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, log_lines: LogLines
) -> None:
    caplog.set_level(logging.DEBUG)
    await _traffic(tmp_path, GATEWAY_LOG_BODIES="1")
    first = log_lines.access()[0]
    assert first["request_body"]["messages"][0]["content"] == PROMPT
    logged = everything_logged(caplog, log_lines)
    for secret in (KEY, TEAM_KEY, UPSTREAM_KEY, WRONG_KEY):
        assert secret not in logged


async def test_every_access_line_field_is_documented_in_the_readme(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, log_lines: LogLines
) -> None:
    """A platform engineer parses these lines: each field (and each usage key) is named in the
    README's "Access log" paragraph."""
    caplog.set_level(logging.INFO, logger="switchyard.access")
    await _traffic(tmp_path, GATEWAY_LOG_BODIES="1")
    lines = log_lines.access()
    fields = {key for line in lines for key in line} | {key for line in lines for key in line["usage"] or {}}
    assert {"request_body", "served_model", "cache_write_1h_tokens"} <= fields  # not vacuous
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    paragraph = readme.split("**Access log.**", 1)[1].split("\n\n", 1)[0]
    assert sorted(field for field in fields if f"`{field}`" not in paragraph) == []


async def test_access_line_format_is_the_envelope_then_the_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, log_lines: LogLines
) -> None:
    """Byte for byte what the queue-listener path wrote before the line writer: the envelope
    (``ts``, ``level``, ``logger``) then the record's fields, one JSON object and a newline."""
    caplog.set_level(logging.INFO, logger="switchyard.access")
    await _traffic(tmp_path)
    lines = [line for line in log_lines.raw().splitlines(keepends=True) if b"switchyard.access" in line]
    assert len(lines) == 3
    for line in lines:
        assert line.endswith(b"}\n") and line.count(b"\n") == 1
        fields = orjson.loads(line)
        assert list(fields)[:4] == ["ts", "level", "logger", "event"]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", fields["ts"])
        envelope = {key: fields.pop(key) for key in ("ts", "level", "logger")}
        assert envelope["level"] == "INFO" and envelope["logger"] == "switchyard.access"
        # the old JsonFormatter: envelope object, its "}" replaced by "," + the message's fields
        before = orjson.dumps(envelope).decode()[:-1] + "," + orjson.dumps(fields).decode()[1:] + "\n"
        assert line == before.encode()


async def test_no_access_line_above_info(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, log_lines: LogLines
) -> None:
    """``GATEWAY_LOG_LEVEL=WARNING``: the access logger is off, the writer gets no line."""
    caplog.set_level(logging.WARNING)
    await _traffic(tmp_path)
    assert log_lines.access() == []


def test_timestamps_match_the_formatter_at_every_second() -> None:
    for now in (0.0, 1.9995, 2.0, 1_735_689_599.999, 1_735_689_600.0, 1_735_689_600.25, 59.5, 60.001):
        expected = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
        assert iso_ts(now) == expected, now
    record = logging.LogRecord("switchyard.server", logging.WARNING, __file__, 1, "x=%d", (1,), None)
    line = orjson.loads(JsonFormatter().format(record))
    assert line == {
        "ts": iso_ts(record.created),
        "level": "WARNING",
        "logger": "switchyard.server",
        "message": "x=1",
    }


LEGACY = "user_8c1e_account_0b6a2c3e-1111-4222-8333-444455556666_session_9d2c1b0a-aaaa-4bbb-8ccc-ddddeeeeffff"


@pytest.mark.parametrize(
    ("headers", "payload", "expected"),
    [
        ({"X-Claude-Code-Session-Id": "h-1", "x-session-id": "s-3"}, {"metadata": {"user_id": "x"}}, "h-1"),
        ([("x-claude-code-session-id", " h-1 ")], {}, "h-1"),
        ({}, {"metadata": {"user_id": '{"device_id":"d","account_uuid":"","session_id":"m-2"}'}}, "m-2"),
        ({"x-session-id": "s-3"}, {"metadata": {"user_id": '{"device_id":"d"}'}}, "s-3"),
        ({}, {"metadata": {"user_id": LEGACY}}, "9d2c1b0a-aaaa-4bbb-8ccc-ddddeeeeffff"),
        ({"x-session-id": "s-3"}, {"metadata": {"user_id": "{not json"}}, "s-3"),
        ({"X-Claude-Code-Session-Id": "bad id\nwith newline", "x-session-id": "s-3"}, {}, "s-3"),
        ({"x-session-id": "x" * 129}, {}, None),
        ({}, {"metadata": "nope"}, None),
        ({}, {}, None),
    ],
)
def test_session_id_precedence(headers: Any, payload: dict[str, Any], expected: str | None) -> None:
    assert session_id_of(headers, payload) == expected
