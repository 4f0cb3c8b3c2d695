"""``x-gateway-upstream``: internal upstream names reach clients only with ``GATEWAY_UPSTREAM_HEADER=1``.

By default the name of the upstream that answered is in the access log line (``upstream``) and the
metrics, never in a response header.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway.access_log import ACCESS_LOGGER
from tests.support.log_lines import LogLines
from tests.upstreams.harness import MODEL, four_upstreams

pytestmark = pytest.mark.timeout(60)
STORM = "fail_first=1000000:529,retry_after_ms=1"


@pytest.mark.parametrize("exposed", [False, True])
async def test_the_upstream_header_is_off_unless_asked(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    log_lines: LogLines,
    exposed: bool,
) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    env = {"GATEWAY_UPSTREAM_HEADER": "1"} if exposed else {}
    async with four_upstreams(tmp_path, monkeypatch, env=env, providers=("anthropic", "bedrock")) as fleet:
        fleet.emulators["primary"].set_fault(STORM)
        client = fleet.client()
        raw = await client.messages.with_raw_response.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
        assert (await raw.parse()).content  # answered by bedrock after the primary's 529s
        assert raw.headers.get("x-gateway-upstream") == ("bedrock" if exposed else None)
        fleet.emulators["primary"].set_fault("")
        raw = await client.messages.with_raw_response.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
        assert raw.headers.get("x-gateway-upstream") == ("primary" if exposed else None)
    lines = [line for line in log_lines.access() if line.get("operation") == "messages"]
    assert [(line["upstream"], line["provider"]) for line in lines] == [
        ("bedrock", "bedrock"),
        ("primary", "anthropic"),
    ]
