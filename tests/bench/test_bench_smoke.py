"""Smoke test of the benchmark harness: fake upstream + load generator for about a second.

This checks that the harness works (requests complete, no errors, sane statistics). It makes no
claim about absolute speed: nothing here asserts a time.
"""

from __future__ import annotations

import math

import orjson
import pytest

from bench import cli, fake_upstream, payloads
from bench.loadgen import LoadConfig, LoadSamples, run_load
from bench.report import percentile, summarize


async def test_paced_stream_reports_time_to_first_delta() -> None:
    server = await fake_upstream.start_server(port=0, deltas=3, event_delay=0.002)
    url = f"http://127.0.0.1:{fake_upstream.server_port(server)}"
    try:
        cfg = LoadConfig(url=url, mode="stream", concurrency=2, duration=0.3, warmup=0.05)
        samples = await run_load(cfg)
    finally:
        server.close()
        await server.wait_closed()
    assert samples.error_count == 0, samples.errors
    assert samples.ok > 2 and len(samples.ttft) == samples.ok
    s = summarize(samples)
    # events are paced, so the order of the three moments is fixed (no absolute times asserted)
    assert s.ttfb_p50_ms < s.ttft_p50_ms < s.p50_ms


def test_percentile_interpolates_like_numpy() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 3.0
    assert percentile(values, 100) == 5.0
    assert percentile(values, 25) == 2.0
    assert percentile([1.0, 2.0], 50) == 1.5
    assert math.isnan(percentile([], 50))
    with pytest.raises(ValueError):
        percentile(values, 101)


def test_stream_payload_is_well_formed() -> None:
    events = payloads.stream_events(3)
    names = [ev.split(b"\n", 1)[0].removeprefix(b"event: ").decode() for ev in events]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    delta = orjson.loads(events[-2].split(b"data: ", 1)[1])
    assert delta["delta"]["stop_reason"] == "end_turn"
    assert delta["usage"]["output_tokens"] == 3
    assert fake_upstream.wants_stream(payloads.request_body(stream=True))
    assert not fake_upstream.wants_stream(payloads.request_body(stream=False))
    assert 1900 < len(payloads.system_prompt()) <= 2048


async def test_loadgen_against_fake_upstream() -> None:
    server = await fake_upstream.start_server(port=0, deltas=10)
    url = f"http://127.0.0.1:{fake_upstream.server_port(server)}"
    try:
        results: dict[str, LoadSamples] = {}
        for mode in ("nonstream", "stream"):
            cfg = LoadConfig(url=url, mode=mode, concurrency=2, duration=0.4, warmup=0.1)
            results[mode] = await run_load(cfg)
    finally:
        server.close()
        await server.wait_closed()

    for mode, samples in results.items():
        assert samples.error_count == 0, samples.errors
        assert samples.ok > 10
        assert samples.statuses == {"200": samples.ok}
        assert len(samples.latency) == len(samples.ttfb) == samples.ok
        s = summarize(samples)
        assert s.mode == mode and s.errors == 0 and s.rps > 0
        assert 0 < s.p50_ms <= s.p99_ms
        assert s.ttfb_p50_ms <= s.p50_ms
        if mode == "stream":
            assert len(samples.ttft) == samples.ok  # every stream had a content_block_delta
            assert s.ttfb_p50_ms <= s.ttft_p50_ms <= s.p50_ms
        # the samples survive the JSON hop from a load generator process to the runner
        again = LoadSamples.merge([LoadSamples.from_json(samples.to_json())] * 2)
        assert again.ok == 2 * samples.ok and again.concurrency == 4

        # every success's completion time is kept, the warm-up's too (the runner picks its own window)
        assert len(samples.ends) > samples.ok
        again_pooled = LoadSamples.pool([samples, samples])
        assert again_pooled.concurrency == samples.concurrency
        assert again_pooled.duration == 2 * samples.duration
        assert summarize(again_pooled).rps == pytest.approx(s.rps)


@pytest.mark.parametrize("name", sorted(cli.SUBCOMMANDS))
def test_every_listed_subcommand_has_its_own_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m bench --help`` lists the sub-commands; each one it lists is dispatched."""
    with pytest.raises(SystemExit) as exit_:
        cli.main([name, "--help"])
    assert exit_.value.code == 0
    assert "usage:" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert f"  {name} " in capsys.readouterr().out
