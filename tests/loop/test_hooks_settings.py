"""Hook settings (Claude Code's shape), matchers, and how a hook's answer is read and merged."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from loop.hooks import (
    AgentHook,
    CommandHook,
    HookEvent,
    HookMatcher,
    HookSettings,
    HttpHook,
    PromptHook,
    PythonHook,
    load_hooks,
)
from loop.hooks.output import HookOutput, from_json, from_stdout, merge


async def allow_all(data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
    return {}


CLAUDE_CODE_SETTINGS = {
    "permissions": {"allow": ["Bash(npm test)"]},  # other settings keys are ignored
    "hooks": {
        "PreToolUse": [
            {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "./guard.sh", "timeout": 5}]},
            {"matcher": "mcp__.*", "hooks": [{"type": "http", "url": "http://127.0.0.1:9/hook",
                                              "headers": {"Authorization": "Bearer $TOKEN"},
                                              "allowedEnvVars": ["TOKEN"]}]},
        ],
        "Stop": [{"hooks": [{"type": "prompt", "prompt": "Is the task done? $ARGUMENTS"},
                            {"type": "agent", "prompt": "Check the tests pass", "model": "claude-haiku-4-5"}]}],
        "PostToolUse": [{"matcher": "*", "hooks": [
            {"type": "python", "callable": "tests.loop.test_hooks_settings:allow_all"}]}],
        "Notification": [{"hooks": [{"type": "command", "command": "notify-send hi"}]}],
    },
}  # fmt: skip


def test_a_claude_code_settings_file_loads(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "settings.json"
    path.write_text(__import__("json").dumps(CLAUDE_CODE_SETTINGS))
    with caplog.at_level(logging.WARNING, "switchyard.loop.hooks"):
        settings = load_hooks(path, cwd=tmp_path, environ={"TOKEN": "t"})
    assert "'Notification' is not raised" in caplog.text
    assert settings.cwd == str(tmp_path)
    assert settings.hooks_for(HookEvent.PRE_TOOL_USE, "Write") == [CommandHook("./guard.sh", 5.0)]
    assert settings.hooks_for(HookEvent.PRE_TOOL_USE, "MultiEdit") == []
    assert settings.hooks_for(HookEvent.PRE_TOOL_USE, "mcp__fs__read") == [
        HttpHook("http://127.0.0.1:9/hook", {"Authorization": "Bearer $TOKEN"}, ("TOKEN",))
    ]
    assert settings.hooks_for(HookEvent.STOP) == [
        PromptHook("Is the task done? $ARGUMENTS"),
        AgentHook("Check the tests pass", "claude-haiku-4-5"),
    ]
    assert settings.hooks_for(HookEvent.POST_TOOL_USE, "anything") == [PythonHook(allow_all)]
    assert settings.has(HookEvent.STOP) and not settings.has(HookEvent.SESSION_END)


@pytest.mark.parametrize(
    ("matcher", "subject", "expected"),
    [
        (None, "Bash", True),
        ("", "Bash", True),
        ("*", "Bash", True),
        ("Bash", "Bash", True),
        ("Bash", "BashOutput", False),  # a plain name is exact
        ("Edit|Write", "Write", True),
        ("Edit|Write", "NotebookEdit", False),
        ("mcp__memory__.*", "mcp__memory__create", True),
        ("Notebook.*", "NotebookEdit", True),
        ("^read_", "read_file", True),
        ("^read_", "thread_read", False),
    ],
)
def test_matchers(matcher: str | None, subject: str, expected: bool) -> None:
    assert HookMatcher(matcher, ()).matches(subject) is expected


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ([], "must be an object"),
        ({"hooks": {"Stop": {}}}, "hooks.Stop must be a list"),
        ({"hooks": {"Stop": [{"hooks": [{"type": "command"}]}]}}, r"hooks.Stop\[0\].hooks\[0\].command"),
        ({"hooks": {"Stop": [{"hooks": [{"type": "mcp_tool", "tool": "x"}]}]}}, "is not one of"),
        ({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x", "timeout": 0}]}]}}, "timeout"),
        ({"hooks": {"PreToolUse": [{"matcher": "(", "hooks": []}]}}, "not a valid regular expression"),
        (
            {"hooks": {"Stop": [{"hooks": [{"type": "python", "callable": "no_such_module:f"}]}]}},
            "cannot be imported",
        ),
        (
            {"hooks": {"Stop": [{"hooks": [{"type": "http", "url": "http://x", "headers": {"a": 1}}]}]}},
            "headers",
        ),
    ],
)
def test_invalid_settings_say_where(settings: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HookSettings.from_json(settings)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read hook settings"):
        load_hooks(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_hooks(bad)


def test_answers_in_claude_codes_shape() -> None:
    assert from_stdout("") == HookOutput()
    assert from_stdout("remember: tabs") == HookOutput(additional_context="remember: tabs")
    assert from_stdout("{oops").error.startswith("the hook printed invalid JSON")
    assert from_json([1]).error == "the hook's JSON answer is a list, not an object"
    deny = from_json(
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "no writes to .env",
            }
        }
    )
    assert (deny.permission, deny.permission_reason, deny.blocked) == ("deny", "no writes to .env", False)
    legacy = from_json({"decision": "approve", "reason": "fine"})
    assert (legacy.permission, legacy.permission_reason) == ("allow", "fine")
    stop = from_json({"continue": False, "stopReason": "build broken", "systemMessage": "hi"})
    assert (stop.stop, stop.stop_reason, stop.system_message) == (True, "build broken", "hi")
    post = from_json(
        {"decision": "block", "reason": "lint: 3 errors", "hookSpecificOutput": {"additionalContext": "see log",
                                                                                 "updatedMCPToolOutput": [1]}}
    )  # fmt: skip
    assert (post.blocked, post.reason, post.additional_context, post.updated_output) == (
        True, "lint: 3 errors", "see log", [1]
    )  # fmt: skip
    rewrite = from_json(
        {"hookSpecificOutput": {"permissionDecision": "allow", "updatedInput": {"path": "b"}}}
    )
    assert rewrite.updated_input == {"path": "b"}
    assert len(from_stdout("x" * 20_000).additional_context) < 10_100


def test_merging_several_answers() -> None:
    merged = merge(
        [
            HookOutput(permission="allow", permission_reason="ok", updated_input={"a": 1}),
            HookOutput(permission="deny", permission_reason="no"),
            HookOutput(permission="ask", permission_reason="maybe", updated_input={"a": 2}),
            HookOutput(blocked=True, reason="r1", additional_context="c1"),
            HookOutput(blocked=True, reason="r2", stop=True, stop_reason="s"),
        ]
    )
    assert (merged.permission, merged.permission_reason) == ("deny", "no")
    assert merged.updated_input == {"a": 2}
    assert (merged.blocked, merged.reason, merged.additional_context) == (True, "r1\nr2", "c1")
    assert (merged.stop, merged.stop_reason) == (True, "s")
    assert merge([HookOutput(), HookOutput()]) == HookOutput()
