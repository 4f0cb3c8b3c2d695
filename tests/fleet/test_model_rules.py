"""Model allow/deny patterns: families, aliases, dated and cloud ids; deny wins; the kill switch."""

from __future__ import annotations

import pytest

from gateway.fleet.model_rules import ModelRules, tier_of


@pytest.mark.parametrize(
    ("model", "tier"),
    [
        ("claude-opus-4-5", "opus"),
        ("claude-opus-4-5-20251101", "opus"),
        ("us.anthropic.claude-opus-4-5-20251101-v1:0", "opus"),
        ("claude-3-5-haiku@20241022", "haiku"),
        ("claude-sonnet-4-5[1m]", "sonnet"),
        ("my-deployment", None),
        ("claude-opusx-1", None),
    ],
)
def test_tiers(model: str, tier: str | None) -> None:
    assert tier_of(model) == tier


def test_patterns_match_aliases_dated_and_cloud_ids() -> None:
    rules = ModelRules(allow=("claude-sonnet-4-5", "claude-haiku-*"))
    for allowed in (
        "claude-sonnet-4-5",
        "claude-sonnet-4-5-20250929",  # dated id -> catalogue alias
        "anthropic.claude-sonnet-4-5-20250929-v1:0",  # Bedrock id -> alias
        "claude-sonnet-4-5[1m]",
        "claude-haiku-4-5",
    ):
        assert rules.permits(allowed), allowed
    for refused in ("claude-sonnet-4-0", "claude-opus-4-5", "gpt-4o", ""):
        assert not rules.permits(refused), refused


def test_deny_wins_and_families_work() -> None:
    rules = ModelRules(allow=None, deny=("opus", "claude-3-*"))
    assert rules.permits("claude-sonnet-4-5")
    assert not rules.permits("us.anthropic.claude-opus-4-1-20250805-v1:0")
    assert not rules.permits("claude-3-7-sonnet-latest")
    message = rules.refusal("claude-opus-4-5")
    assert message is not None and "'claude-opus-4-5'" in message


def test_kill_switch_names_the_model_and_tier() -> None:
    rules = ModelRules(killed=frozenset({"haiku"}))
    assert not rules.unrestricted
    message = rules.refusal("claude-haiku-4-5-20251001")
    assert message is not None and "claude-haiku-4-5-20251001" in message and "haiku" in message
    assert rules.filter_ids(["claude-haiku-4-5", "claude-sonnet-4-5"]) == ["claude-sonnet-4-5"]


def test_a_long_model_name_is_cut_in_the_message() -> None:
    message = ModelRules(deny=("*",)).refusal("x" * 5000)
    assert message is not None and len(message) < 300
