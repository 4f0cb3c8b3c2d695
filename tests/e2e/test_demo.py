"""The demo (`make demo`, `python -m bench.demo`) end to end: the table it prints reflects a real cached, tool-using run."""

from __future__ import annotations

import io
import itertools
import os
import re
import subprocess
import sys

import pytest

from bench.demo import run_demo


@pytest.mark.parametrize("provider", ["anthropic", "bedrock", "vertex", "foundry"])
def test_demo_runs_and_reports_cache_reads(provider: str) -> None:
    out = io.StringIO()  # run_demo owns its event loop
    before = dict(os.environ)
    assert run_demo(turns=4, out=out, provider=provider) == 0
    assert dict(os.environ) == before  # the fixture credentials it set for the SDKs are gone again
    text = out.getvalue()
    rows = re.findall(r"^\s+(\d+)\s+(\w+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+$", text, re.MULTILINE)
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4]
    assert rows[0][1] == "tool_use" and rows[-1][1] == "end_turn"
    assert int(rows[0][3]) == 0 and int(rows[0][4]) > 0  # turn 1 writes the cache
    for previous, current in itertools.pairwise(rows):  # each turn reads what the last wrote
        assert int(current[3]) == int(previous[3]) + int(previous[4])
    assert 'gateway_tokens_total{kind="cache_read"' in text
    assert "demo: OK" in text


def test_demo_cli_exit_code() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.demo", "--turns", "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "demo: OK" in result.stdout
    # the SDK warns about a model past its end-of-life: the demo's first output was that warning
    assert "deprecated" not in result.stderr, result.stderr
