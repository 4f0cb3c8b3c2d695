"""A client's ``model`` field is whatever it sent: megabytes of it must cost nothing that lasts.

Observed before: every distinct name stayed in the metrics' caches of resolved series (up to 4,096
names of any length: 200 requests with 1 MB names held 190 MB more, for good), and each request's
access line carried the name twice (2 MB lines; the log writer, bounded at 4 MB, then dropped
other requests' lines behind them). Now names longer than a model's are labelled ``other`` without
being kept, and the access line shows the first 256 characters and the length.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import orjson
import pytest

from gateway.app import METRICS_KEY
from tests.providers.bedrock_harness import apply_aws_env, isolated_aws_files
from tests.support.gateway_stack import CLIENT_KEY, Connect, StackFactory
from tests.support.log_lines import LogLines
from tests.support.raw_http import request_bytes
from tests.support.raw_upstream import CLIENT_KEY as SCRIPTED_CLIENT_KEY
from tests.support.raw_upstream import ScriptedUpstream, scripted_gateway
from tests.support.waiting import wait_until

LONG = 200_000
REQUESTS = 10


def body(model: str, path: str) -> bytes:
    payload: dict[str, object] = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    if path == "/v1/messages":
        payload["max_tokens"] = 16
    return orjson.dumps(payload)


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_long_model_names_are_neither_kept_nor_logged_whole(
    make_stack: StackFactory, connect: Connect, log_lines: LogLines, path: str
) -> None:
    stack = make_stack(GATEWAY_MAX_RETRIES="0")
    connection = connect(stack)
    headers = [("x-api-key", CLIENT_KEY), ("content-type", "application/json")]
    for index in range(REQUESTS):
        model = f"claude-{index}-" + "m" * LONG
        answer = connection.send(request_bytes("POST", path, headers, body(model, path)))
        assert answer.status == 404, answer.body[:200]  # the upstream's answer for an unknown model
    assert connection.send(request_bytes("POST", path, headers, body("claude-sonnet-4-5", path))).status == 200

    lines = wait_until(lambda: len(log_lines.access()) == REQUESTS + 1 and log_lines.access())
    assert len(log_lines.raw()) < (REQUESTS + 1) * 4096
    first = lines[0]
    assert first["model"] == first["served_model"]
    assert first["model"].startswith("claude-0-mmm") and first["model"].endswith(f"({LONG + 9} characters)")
    assert lines[-1]["model"] == "claude-sonnet-4-5"

    metrics = stack.gateway.runner.app[METRICS_KEY]
    kept = [*metrics._labels, *(name for key in metrics._finished for name in key if isinstance(name, str))]
    assert "claude-sonnet-4-5" in kept
    assert max(len(name) for name in kept) <= 256


async def test_a_long_name_in_a_refusal_is_not_logged_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_lines: LogLines
) -> None:
    """A cloud upstream refuses an unknown model before sending, naming it ('model: ... is not served
    by the bedrock upstream'): that message was the access line's ``failure``, the name whole."""
    env = {
        "GATEWAY_PROVIDER": "bedrock",
        "AWS_REGION": "us-east-1",
        "AWS_BEARER_TOKEN_BEDROCK": "ABSKQmVkcm9ja0FQSUtleS1leGFtcGxlLXRva2Vu",
        "ANTHROPIC_BEDROCK_BASE_URL": "{upstream}",
        **isolated_aws_files(tmp_path),
    }
    apply_aws_env(monkeypatch, env)
    model = "claude-0-" + "m" * LONG
    async with (
        scripted_gateway(ScriptedUpstream(), env) as (server, _),
        aiohttp.ClientSession() as session,
        session.post(
            f"{server.base_url}/v1/messages",
            data=body(model, "/v1/messages"),
            headers={"x-api-key": SCRIPTED_CLIENT_KEY, "content-type": "application/json"},
        ) as response,
    ):
        assert response.status == 404, await response.text()
    (line,) = wait_until(lambda: log_lines.access())
    assert "is not served by the bedrock upstream" in line["failure"]
    assert len(log_lines.raw()) < 8192  # (201,400 bytes before)
