"""Cost arithmetic against hand-computed cases, for every shape in which usage arrives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.config import ConfigError, Settings
from gateway.pricing import (
    DEFAULT_TABLE,
    Cost,
    PricingError,
    load_price_table,
    parse_price_table,
)
from gateway.streaming.sse import encode_event
from gateway.streaming.usage import StreamObserver, Usage, usage_from_message


def exact(value: float) -> Any:
    return pytest.approx(value, rel=1e-12, abs=1e-15)


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(encode_event(str(e["type"]), e) for e in events)


def observed(body: bytes) -> Usage:
    observer = StreamObserver()
    for i in range(0, len(body), 7):  # arbitrary chunking
        observer.feed(body[i : i + 7])
    assert observer.finished
    return observer.usage


FULL = {  # first-party usage: 1000 uncached, 20k read, 1k written for 5m, 2k for 1h
    "input_tokens": 1000,
    "output_tokens": 500,
    "cache_read_input_tokens": 20_000,
    "cache_creation_input_tokens": 3000,
    "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 2000},
}
# Sonnet 4.5 at $3 / $15 per MTok: read 0.30, 5m write 3.75, 1h write 6.00
SONNET_FULL = 1000 * 3e-6 + 500 * 15e-6 + 20_000 * 0.3e-6 + 1000 * 3.75e-6 + 2000 * 6e-6
BEDROCK_FULL = 1000 * 3e-6 + 500 * 15e-6 + 20_000 * 0.3e-6 + 3000 * 3.75e-6  # no breakdown: 5m writes


def message(usage: dict[str, Any] | None) -> bytes:
    body: dict[str, Any] = {"type": "message", "role": "assistant", "content": [], "stop_reason": "end_turn"}
    if usage is not None:
        body["usage"] = usage
    return orjson.dumps(body)


def stream(start_usage: dict[str, Any], delta_usage: dict[str, Any], **stop: Any) -> bytes:
    return sse(
        {"type": "message_start", "message": {"id": "msg_1", "usage": start_usage}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": delta_usage},
        {"type": "message_stop", **stop},
    )


def test_hand_computed_constants() -> None:
    assert exact(0.03225) == SONNET_FULL
    assert exact(0.02775) == BEDROCK_FULL


def test_non_streaming_first_party() -> None:
    usage, _ = usage_from_message(message(FULL))
    cost = DEFAULT_TABLE.cost("anthropic", "claude-sonnet-4-5-20250929", usage)
    assert cost.input == exact(0.003) and cost.output == exact(0.0075)
    assert cost.cache_read == exact(0.006)
    assert cost.cache_write_5m == exact(0.00375) and cost.cache_write_1h == exact(0.012)
    assert cost.total == exact(SONNET_FULL)


def test_streaming_first_party_counts_cumulative_delta_usage_once() -> None:
    start = {**FULL, "output_tokens": 1}
    # the final message_delta repeats the cumulative input and cache counts
    delta = {k: v for k, v in FULL.items() if k != "cache_creation"}
    usage = observed(stream(start, delta))
    assert DEFAULT_TABLE.cost("anthropic", "claude-sonnet-4-5", usage).total == exact(SONNET_FULL)


def test_bedrock_non_streaming_without_ttl_breakdown_prices_writes_as_5m() -> None:
    usage, _ = usage_from_message(message({k: v for k, v in FULL.items() if k != "cache_creation"}))
    model = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
    assert DEFAULT_TABLE.cost("bedrock", model, usage).total == exact(BEDROCK_FULL)


def test_bedrock_stream_ignores_invocation_metrics_and_keeps_cache_counts() -> None:
    start = {k: v for k, v in FULL.items() if k != "cache_creation"} | {"output_tokens": 1}
    metrics = {
        "inputTokenCount": 1000,
        "outputTokenCount": 500,
        "cacheReadInputTokenCount": 20_000,
        "cacheWriteInputTokenCount": 3000,
    }
    body = stream(start, {"output_tokens": 500}, **{"amazon-bedrock-invocationMetrics": metrics})
    usage = observed(body)
    assert usage == Usage(1000, 500, 20_000, 3000, 0)
    cost = DEFAULT_TABLE.cost("bedrock", "anthropic.claude-sonnet-4-5-20250929-v1:0", usage)
    assert cost.total == exact(BEDROCK_FULL)


def test_vertex_stream_with_native_model_id() -> None:
    start = {**FULL, "output_tokens": 1}
    usage = observed(stream(start, {"output_tokens": 500}))
    assert DEFAULT_TABLE.cost("vertex", "claude-sonnet-4-5@20250929", usage).total == exact(SONNET_FULL)


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (None, 0.0),  # an error body or a message without usage
        ({"output_tokens": 10}, 10 * 5e-6),
        ({"input_tokens": 2000}, 2000 * 1e-6),
        ({"input_tokens": 100, "output_tokens": 10, "cache_read_input_tokens": None}, 100e-6 + 50e-6),
        (
            {"input_tokens": 10, "output_tokens": 0, "cache_creation": {"ephemeral_1h_input_tokens": 4096}},
            10e-6 + 4096 * 2e-6,
        ),
    ],
)
def test_missing_fields_count_as_zero(usage: dict[str, Any] | None, expected: float) -> None:
    parsed, _ = usage_from_message(message(usage))
    assert DEFAULT_TABLE.cost("anthropic", "claude-haiku-4-5", parsed).total == exact(expected)


@pytest.mark.parametrize(
    ("model", "per_mtok_in", "per_mtok_out"),
    [
        ("claude-opus-4-5", 5, 25),
        ("claude-opus-4-6", 5, 25),
        ("claude-opus-4-1-20250805", 15, 75),
        ("claude-opus-4-20250514", 15, 75),
        ("claude-sonnet-4-6", 3, 15),
        ("claude-sonnet-4-20250514", 3, 15),
        ("claude-3-7-sonnet-20250219", 3, 15),
        ("claude-haiku-4-5-20251001", 1, 5),
        ("claude-3-5-haiku-20241022", 0.8, 4),
        ("a-model-nobody-priced", 15, 75),  # unknown: the highest tier, never under-reported
    ],
)
def test_base_prices_per_model(model: str, per_mtok_in: float, per_mtok_out: float) -> None:
    # 50k tokens of each kind: 0.05 MTok, below the long-context threshold
    usage = Usage(input_tokens=50_000, output_tokens=50_000)
    cost = DEFAULT_TABLE.cost("anthropic", model, usage)
    assert (cost.input, cost.output) == (exact(per_mtok_in * 0.05), exact(per_mtok_out * 0.05))
    cached = DEFAULT_TABLE.cost("foundry", model, Usage(0, 0, 50_000, 50_000, 50_000))
    assert cached.cache_read == exact(per_mtok_in * 0.1 * 0.05)
    assert cached.cache_write_5m == exact(per_mtok_in * 1.25 * 0.05)
    assert cached.cache_write_1h == exact(per_mtok_in * 2 * 0.05)


def test_long_context_applies_above_200k_total_input() -> None:
    at_limit = Usage(input_tokens=140_000, output_tokens=1000, cache_read_input_tokens=60_000)
    assert DEFAULT_TABLE.cost("anthropic", "claude-sonnet-4-5", at_limit).total == exact(
        140_000 * 3e-6 + 60_000 * 0.3e-6 + 1000 * 15e-6
    )
    above = Usage(input_tokens=150_000, output_tokens=1000, cache_read_input_tokens=60_000)
    assert DEFAULT_TABLE.cost("anthropic", "claude-sonnet-4-5", above).total == exact(0.9 + 0.036 + 0.0225)
    # no long-context tier for Haiku 4.5: the same tokens at the standard rates
    assert DEFAULT_TABLE.cost("anthropic", "claude-haiku-4-5", above).total == exact(
        150_000 * 1e-6 + 60_000 * 0.1e-6 + 1000 * 5e-6
    )


def test_cost_by_kind_adds_up() -> None:
    cost = Cost(1.0, 2.0, 0.25, 0.5, 0.125)
    assert cost.total == 3.875
    assert dict(cost.by_kind()) == {
        "input": 1.0,
        "output": 2.0,
        "cache_read": 0.25,
        "cache_write_5m": 0.5,
        "cache_write_1h": 0.125,
    }


OVERRIDES = {
    "source": "contract 2026-07",
    "default": {"input": 2, "output": 8},
    "models": {
        "claude-sonnet-4-5": {"input": 2.5, "output": 12.5, "cache_read": 0.2},
        "my-deployment": {"input": 1, "output": 2},
    },
    "providers": {
        "bedrock": {"multiplier": 1.1, "models": {"claude-haiku-4-5": {"input": 0.5, "output": 2.5}}}
    },
}


def test_override_file(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(orjson.dumps(OVERRIDES).decode())
    table = load_price_table(path)
    assert table.source == "contract 2026-07"
    usage = Usage(1_000_000, 1_000_000, 1_000_000, 1_000_000, 1_000_000)
    sonnet = table.cost("anthropic", "claude-sonnet-4-5-20250929", usage)
    assert sonnet.by_kind() == Cost(2.5, 12.5, 0.2, exact(3.125), exact(5.0)).by_kind()
    assert table.cost("foundry", "my-deployment", Usage(1_000_000, 1_000_000)).total == exact(3.0)
    assert table.cost("anthropic", "unknown", Usage(1_000_000, 1_000_000)).total == exact(10.0)
    assert table.cost("anthropic", "claude-opus-4-5", Usage(1_000_000)).total == exact(5.0)  # built-in kept
    # bedrock: the shared table scaled by 1.1, its own entries as they are
    assert table.cost("bedrock", "claude-opus-4-5", Usage(1_000_000)).total == exact(5.5)
    assert table.cost("bedrock", "claude-haiku-4-5", Usage(1_000_000)).total == exact(0.5)


def test_the_model_that_answered_is_priced(tmp_path: Path) -> None:
    """A model map's target answered: it is priced, not the client's alias (an unknown name, priced
    at the ``other`` tier: 15 times Haiku's input price)."""
    path = tmp_path / "prices.json"
    path.write_text(orjson.dumps(OVERRIDES).decode())
    table = load_price_table(path)
    usage = Usage(1_000_000)
    assert DEFAULT_TABLE.cost("anthropic", "fast", usage, "claude-haiku-4-5").total == exact(1.0)
    assert DEFAULT_TABLE.cost("anthropic", "fast", usage).total == exact(15.0)  # nothing mapped
    native = "us.anthropic.claude-haiku-4-5-20251001-v1:0"  # a provider-native id folds to its alias
    assert DEFAULT_TABLE.cost("bedrock", "fast", usage, native).total == exact(1.0)
    # an id the table does not know (a deployment name): the client's name is priced
    assert DEFAULT_TABLE.cost("foundry", "claude-opus-4-5", usage, "dep-7").total == exact(5.0)
    # the override file's entry for the deployment wins over the client's name
    assert table.cost("foundry", "claude-opus-4-5", usage, "my-deployment").total == exact(1.0)
    # a provider's own entry for the answering model, before the client's name
    assert table.cost("bedrock", "claude-opus-4-5", usage, "claude-haiku-4-5").total == exact(0.5)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("{", "invalid JSON"),
        ('{"models": {"x": {"input": -1, "output": 1}}}', "models.x.input"),
        ('{"models": {"x": {"input": 1}}}', "models.x.output"),
        ('{"providers": {"azure": {}}}', "providers.azure"),
        ('{"modles": {}}', "modles"),
        # Python's json reads Infinity and NaN: every cost was inf, or nan (inf x 0 tokens)
        ('{"default": {"input": Infinity, "output": 15}}', "default.input: Input should be a finite"),
        ('{"providers": {"bedrock": {"multiplier": Infinity}}}', "providers.bedrock.multiplier"),
    ],
)
def test_invalid_override_is_reported_where(document: str, message: str) -> None:
    with pytest.raises(PricingError, match=message.replace(".", r"\.")):
        parse_price_table(document, "prices.json")


def test_settings_validate_the_pricing_file(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(orjson.dumps(OVERRIDES).decode())
    settings = Settings.from_environ({"GATEWAY_PRICING_FILE": str(good), "GATEWAY_LOG_BODIES": "1"})
    assert settings.observability.pricing_file == good and settings.observability.log_bodies is True
    assert Settings.from_environ({}).observability.log_bodies is False
    bad = tmp_path / "bad.json"
    bad.write_text('{"default": {"input": "free"}}')
    with pytest.raises(ConfigError, match=r"^GATEWAY_PRICING_FILE: .*default\.input"):
        Settings.from_environ({"GATEWAY_PRICING_FILE": str(bad)})
    with pytest.raises(ConfigError, match=r"^GATEWAY_PRICING_FILE: file not found"):
        Settings.from_environ({"GATEWAY_PRICING_FILE": str(tmp_path / "missing.json")})
