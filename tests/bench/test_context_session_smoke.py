"""Smoke test of ``python -m bench.context_session``: a short session per configuration,
and the figures recomputed here from the per-call usage the report keeps. No time and no target is
asserted (CPU figures are only checked to exist)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from bench import context_report as report
from bench import context_session as bench
from loop.usage import TokenUsage

CALLS = 24
"""A prompt is 20 calls: the second prompt's first four calls run in a new query() on the history."""


def test_a_short_session_per_configuration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "context.json"
    assert bench.main(["--calls", str(CALLS), "--configs", "no_layers,summary_64k", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "whole context pass over a" in printed and "cache-read share" in printed
    data = orjson.loads(out.read_bytes())
    assert [c["name"] for c in data["configs"]] == ["no_layers", "summary_64k"]
    for config in data["configs"]:
        assert config["main_calls"] == CALLS == len(config["per_call"])
        assert config["terminals"] == ["completed", "max_turns"]  # 20 calls, then the 4 left
        calls = [TokenUsage(**row) for row in config["per_call"]]
        assert config["peak_context_tokens"] == max(u.context_tokens for u in calls)
        assert config["cost_call_20_usd"] == pytest.approx(report.cost(bench.MODEL, calls[19]))
        assert config["cost_call_200_usd"] is None
        if config["summariser_calls"] == 0:
            prompt = sum(u.context_tokens for u in calls)
            assert config["cache_read_share"] == pytest.approx(
                sum(u.cache_read_input_tokens for u in calls) / prompt
            )
            assert config["billed_input_tokens"] == sum(
                u.input_tokens + u.cache_creation_input_tokens for u in calls
            )
        # each call reads the previous one's prefix: the history grows, the cache keeps up
        assert all(u.cache_read_input_tokens > 0 for u in calls[1:])
    no_layers, summary = data["configs"]
    assert no_layers["offline_pass_ms"]["history_tokens"] > 10_000 and no_layers["offline_pass_ms"]["p99"] > 0
    assert no_layers["layer_cpu_ms"]["p99"] == 0  # the layers are off
    assert summary["layer_cpu_ms"]["p99"] > 0
    assert no_layers["compactions"] == {}


def test_percentiles_and_costs() -> None:
    assert report.percentile([], 99) == 0
    assert report.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert report.percentile([float(i) for i in range(1, 101)], 99) == 99.0
    usage = TokenUsage(input_tokens=100_000)  # (under 200k: no long-context rate)
    assert report.cost(bench.MODEL, usage) == pytest.approx(0.3)  # Sonnet: $3 per million input tokens
    read = TokenUsage(cache_read_input_tokens=100_000)  # $0.30 per million cache-read tokens
    result = report.ConfigResult("x", "", bench.MODEL, calls=[usage, read])
    assert result.mean_cost(1, 2) == pytest.approx((0.3 + 0.03) / 2)
    assert result.mean_cost(1, 3) is None
