"""Smoke test of ``python -m bench.provider_latency``: both providers' emulators and
gateways for real, 10 requests per path.

This checks that the benchmark works (every row present, every request answered with the same
scripted answer, positive latencies, the Bedrock-vs-first-party summary computed). It makes no
claim about speed: nothing here asserts an absolute time or which path is faster.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench import latency_paths as paths
from bench import latency_report as report
from bench import provider_latency as pl
from bench.eventstream_bench import stream_events
from emulators.bedrock_frames import chunk_frame
from gateway.streaming.sse import encode_event

REQUESTS = 10


def test_provider_latency_report_has_every_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "latency.json"
    code = pl.main(["--requests", str(REQUESTS), "--warmup", "2", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed

    report: dict[str, Any] = orjson.loads(out.read_bytes())
    assert report["errors"] == 0
    rows = {(r["provider"], r["mode"]): r for r in report["rows"]}
    assert set(rows) == {(p, m) for p in pl.PROVIDERS for m in pl.MODES}
    for (provider, mode), row in rows.items():
        for path in ("direct", "gateway"):
            stats = row[path]
            assert stats["requests"] == stats["ok"] == REQUESTS, (provider, mode, path, stats)
            assert stats["errors"] == {}
            assert 0 < stats["p50_ms"] <= stats["p99_ms"], (provider, mode, path)
            assert stats["response_bytes"] > 0
        assert math.isclose(row["added_p50_ms"], row["gateway"]["p50_ms"] - row["direct"]["p50_ms"])
        assert row["gateway"]["cpu_ms_per_request"]["gateway"] >= 0
        assert f"{provider:<10} {mode:<9} |" in printed

    # the same scripted answer on every path: 50 text deltas per stream, one text per Message
    for mode in pl.MODES:
        answers = {rows[p, mode][path]["answer"] for p in pl.PROVIDERS for path in ("direct", "gateway")}
        assert len(answers) == 1, (mode, answers)
    assert rows["bedrock", "stream"]["direct"]["answer"] == paths.TARGET_DELTAS

    gaps = {g["mode"]: g for g in report["bedrock_vs_first_party"]}
    assert set(gaps) == set(pl.MODES)
    for mode, gap in gaps.items():
        assert gap["added_bedrock_ms"] == rows["bedrock", mode]["added_p50_ms"]
        assert gap["added_first_party_ms"] == rows["anthropic", mode]["added_p50_ms"]
        assert math.isclose(gap["difference_ms"], gap["added_bedrock_ms"] - gap["added_first_party_ms"])
    assert "Bedrock vs first party, added p50" in printed
    assert all(g["gateway_cpu_bedrock_ms"] >= 0 for g in gaps.values())


def test_answer_checks_decode_both_wire_formats() -> None:
    events = stream_events(4)
    sse = b"".join(encode_event(e["type"], e) for e in events)
    frames = b"".join(chunk_frame(e) for e in events)
    assert paths.sse_deltas(sse) == paths.eventstream_deltas(frames) == 4
    with pytest.raises(ValueError):
        paths.sse_deltas(sse[: len(sse) // 2])  # cut short: no message_stop
    with pytest.raises(ValueError):
        paths.eventstream_deltas(frames[:-8])
    message = orjson.dumps({"type": "message", "content": [{"type": "text", "text": "abc"}]})
    assert paths.message_chars(message) == 3


def test_gateway_env_keeps_only_the_emulator_settings() -> None:
    class FakeEmulator:
        env = {"GATEWAY_PROVIDER": "bedrock", "ANTHROPIC_BEDROCK_BASE_URL": "http://127.0.0.1:1"}
        process_env = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_EC2_METADATA_DISABLED": "true"}

    base = {"PATH": "/bin", "AWS_PROFILE": "prod", "HTTPS_PROXY": "http://proxy:3128", "GATEWAY_PORT": "1"}
    env = pl.gateway_env(base, FakeEmulator(), 4242)  # type: ignore[arg-type]
    assert "AWS_PROFILE" not in env and "HTTPS_PROXY" not in env
    assert env["PATH"] == "/bin" and env["GATEWAY_PORT"] == "4242"
    assert env["AWS_ACCESS_KEY_ID"] == "AKIDEXAMPLE" and env["GATEWAY_API_KEYS"] == pl.CLIENT_KEY


def test_gap_ratio_needs_a_positive_first_party_figure() -> None:
    assert report.ProviderGap("stream", 3.0, 1.5).ratio == 2.0
    assert report.ProviderGap("stream", 3.0, 1.5).difference_ms == 1.5
    assert math.isnan(report.ProviderGap("stream", 3.0, 0.0).ratio)
