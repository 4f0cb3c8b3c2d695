"""Smoke test of ``python -m bench.cache_efficiency``: 6 turns on the first-party and
Bedrock emulators through in-process gateways, plus the pieces it is built from.

This checks that the benchmark works (the report has every provider, turn and figure; the toggled
betas really were left out by the client and still reached the upstream through the gateway's
latch; the session is shaped like Claude Code's). It asserts no time and no cache-share target.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from bench import cache_efficiency as ce
from bench import cache_report as report
from bench.cc_session import ClaudeCodeSession, with_cch
from emulators.recorder import RecordedRequest

TURNS = 6
PROVIDERS = ("anthropic", "bedrock")
SWITCH_TURN = 5  # turn 5 switches the model, turn 6 switches back


def test_six_turn_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cache.json"
    code = ce.main(
        [
            "--turns",
            str(TURNS),
            "--providers",
            ",".join(PROVIDERS),
            "--switch-turn",
            str(SWITCH_TURN),
            "--json",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code in (0, 1), printed  # 1 means a target was missed: still a complete report
    report: dict[str, Any] = orjson.loads(out.read_bytes())

    env = report["environment"]
    assert env["turns"] == TURNS and env["switch"]["turns"] == [SWITCH_TURN, SWITCH_TURN + 1]
    toggled = {int(turn): betas for turn, betas in env["toggles"].items()}
    assert toggled and all(2 <= turn <= TURNS for turn in toggled)

    assert [p["provider"] for p in report["providers"]] == list(PROVIDERS)
    for result in report["providers"]:
        provider = result["provider"]
        turns = result["turns"]
        assert [t["turn"] for t in turns] == list(range(1, TURNS + 1))
        assert result["measured_turns"] == [3, 4]
        assert result["excluded_turns"] == [1, 2, SWITCH_TURN, SWITCH_TURN + 1]
        for key in ("cache_share", "ceiling_share", "cache_share_incl_switch_turns"):
            assert 0.0 <= result[key] <= 1.0, (provider, key, result[key])
        assert set(result["passed"]) == {"cache_share", "gateway_breaks", "classified", "latch", "detector"}
        assert result["classified"]["total"] >= 3  # turn 1 and both switch turns
        assert result["expected_breaks"] == {
            "1": "first_request",
            str(SWITCH_TURN): "model_changed",
            str(SWITCH_TURN + 1): "model_changed",
        }
        assert isinstance(result["breaks_by_reason"], dict)
        for t in turns:
            assert t["upstream_requests"] == 1, (provider, t["turn"])
            assert t["stop_reason"] == "tool_use" and t["tool"], (provider, t["turn"])
            assert t["total_input"] == t["input_tokens"] + t["cache_read"] + t["cache_write"] > 0
            assert t["upstream_model"]
        assert turns[0]["cache_write"] > 0 and turns[0]["cache_read"] == 0
        assert turns[SWITCH_TURN - 1]["model"] == ce.DEFAULT_SWITCH_MODEL

        # the latch: every toggled turn's dropped beta reached the upstream anyway, where the
        # upstream takes it: Bedrock takes context-management only for clear_tool_uses edits, not
        # Claude Code's clear_thinking ones (its own Bedrock mode sends neither: providers.md s7)
        for turn, betas in toggled.items():
            record = turns[turn - 1]
            expected = [b for b in betas if provider == "anthropic" or b != "context-management-2025-06-27"]
            assert record["dropped_betas"] == betas
            assert record["latch_expected"] == expected, (provider, turn)
            assert set(expected) <= set(record["upstream_betas"]), (provider, turn, record["upstream_betas"])
            assert "context-management-2025-06-27" not in record["upstream_betas"] or provider == "anthropic"
            assert record["latch_ok"]
        assert result["latch"] == {"ok": len(toggled), "toggled_turns": len(toggled)}

    assert "cache share" in printed and "targets:" in printed
    for provider in PROVIDERS:
        assert f"{provider:<10} |" in printed


def test_session_is_shaped_like_claude_code() -> None:
    session = ClaudeCodeSession.from_fixture()
    first = session.next_request()
    second = session.next_request()
    billing = [first["system"][0]["text"], second["system"][0]["text"]]
    assert all(b.startswith("x-anthropic-billing-header:") and "; cch=" in b for b in billing)
    assert billing[0] != billing[1]  # a fresh cch= on every request
    assert [("cache_control" in b) for b in first["system"]] == [False, True, True]

    session.add_answer(
        [{"type": "text", "text": "ok"}, {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]
    )
    session.add_tool_results([("t1", "hi")])
    messages = session.messages()
    marked = [
        (m_index, b_index)
        for m_index, m in enumerate(messages)
        if isinstance(m["content"], list)
        for b_index, b in enumerate(m["content"])
        if "cache_control" in b
    ]
    assert marked == [(len(messages) - 1, 0)]  # only the newest block carries the message breakpoint
    assert messages[-1]["content"][0] == {
        "tool_use_id": "t1",
        "type": "tool_result",
        "content": "hi",
        "is_error": False,
        "cache_control": {"type": "ephemeral"},
    }

    headers = session.headers([report.CM], {"x-emulator-scenario": "agent"})
    assert report.CM not in headers["anthropic-beta"].split(",")
    assert report.CM in session.headers()["anthropic-beta"].split(",")
    assert headers["X-Claude-Code-Session-Id"] == session.session_id
    assert "x-api-key" not in {k.lower() for k in headers}

    assert session.fold_system_messages() == 1
    assert all(m["role"] != "system" for m in session.history)
    assert session.history[0]["content"][0]["text"].startswith("<system-reminder>")


def test_with_cch_replaces_or_appends() -> None:
    base = "x-anthropic-billing-header: cc_version=2.1.197.c40; cc_entrypoint=sdk-cli;"
    assert with_cch(base, "abcde") == base + " cch=abcde;"
    assert with_cch(base + " cch=70e58;", "00000") == base + " cch=00000;"


def _recorded(body: dict[str, Any], betas: str = "a,b") -> RecordedRequest:
    return RecordedRequest(
        "POST", "/v1/messages?beta=true", (("anthropic-beta", betas),), orjson.dumps(body), 0.0
    )


def test_prefix_changes_name_what_broke() -> None:
    tool = {"name": "Bash", "description": "d", "input_schema": {"type": "object", "properties": {}}}
    body: dict[str, Any] = {
        "model": "m",
        "tools": [tool],
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=1; cch=00001;"},
            {"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {}}]}],
    }
    before = ce.UpstreamPrefix.of("anthropic", _recorded(body))

    grown = orjson.loads(orjson.dumps(body))
    grown["messages"][0]["content"][0].pop("cache_control")  # the breakpoint moved on
    grown["messages"].append({"role": "assistant", "content": [{"type": "text", "text": "yo"}]})
    grown["system"][0]["text"] = "x-anthropic-billing-header: cc_version=1; cch=00002;"
    after = ce.UpstreamPrefix.of("anthropic", _recorded(grown, "b,a"))
    assert ce.prefix_changes(before, after, billing_in_key=False) == []  # beta order is not a break
    assert ce.prefix_changes(before, after, billing_in_key=True) == ["billing header cch=00001 -> cch=00002"]

    reordered = orjson.loads(orjson.dumps(body))
    reordered["tools"] = [{"input_schema": tool["input_schema"], "name": "Bash", "description": "d"}]
    reordered["model"] = "n"
    changes = ce.prefix_changes(before, ce.UpstreamPrefix.of("anthropic", _recorded(reordered, "a")), False)
    assert changes == ["model m -> n", "betas -b +()", "tools (key order only)"]

    edited = orjson.loads(orjson.dumps(grown))
    edited["messages"][0]["content"][0]["text"] = "changed"
    assert ce.prefix_changes(after, ce.UpstreamPrefix.of("anthropic", _recorded(edited, "a,b")), False) == [
        "messages[0]"
    ]


def test_toggle_spec_and_validation() -> None:
    assert ce.parse_toggles("4:x,5:x,5:y") == {4: ("x",), 5: ("x", "y")}
    with pytest.raises(ValueError):
        ce.validate(ce.Options(toggles={1: (report.CM,)}))  # turn 1 must send it, or nothing latches
    with pytest.raises(ValueError):
        ce.validate(ce.Options(toggles={4: ("claude-code-20250219",)}))  # not a latched beta
    assert ce.Options(turns=30).switch_turns == (20, 21)
    assert ce.Options(turns=6).switch_turns == ()
