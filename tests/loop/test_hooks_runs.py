"""Hooks in whole runs on the FakeModel: real shell scripts reading JSON on stdin (exit codes and
JSON answers), Python callbacks, and the model judges. The webhook kind is in
``test_hooks_webhook.py``, runs through the gateway in ``test_hooks_e2e.py``."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

import loop
from loop.hooks import HookMatcher, HookSettings, PythonHook
from loop.hooks.judges import JUDGE_MODEL, JUDGE_SYSTEM
from loop.hooks.lifecycle import PreCompactCaller
from loop.hooks.runner import HookRunner
from loop.request import ModelRequest
from loop.testing import FakeModel, FakeResponse, FakeTool, VirtualClock, text, tool_use
from loop.tools import PermissionMode, PermissionPolicy
from loop.tools.permissions import PermissionRequest, PermissionRule, PermissionVerdict
from loop.transitions import (
    Completed,
    HookStopped,
    ModelError,
    NextTurn,
    StopHookBlocking,
    StopHookLimit,
    StopHookPrevented,
)
from tests.loop.support import pairing_violations

READ_FIELD = "python3 -c \"import json,sys; print(json.load(sys.stdin).get('{field}', ''))\""


def script(directory: Path, name: str, body: str) -> str:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def command_hooks(
    event: str, command: str, *, matcher: str | None = None, timeout: float | None = None
) -> dict[str, Any]:
    hook: dict[str, Any] = {"type": "command", "command": command}
    if timeout is not None:
        hook["timeout"] = timeout
    group: dict[str, Any] = {"hooks": [hook]}
    if matcher is not None:
        group["matcher"] = matcher
    return {event: [group]}


def hooked_run(
    script_: list[FakeResponse],
    hooks: HookSettings | dict[str, Any],
    *,
    tools: tuple[FakeTool, ...] = (),
    permissions: PermissionPolicy | None = None,
    can_use_tool: Any = None,
    prompt: str = "do the task",
    **config: Any,
) -> tuple[loop.Run, FakeModel]:
    clock = VirtualClock()
    model = FakeModel(script_, clock=clock)
    settings = hooks if isinstance(hooks, HookSettings) else HookSettings.from_json({"hooks": hooks})
    params = loop.QueryParams(
        messages=prompt,
        tools=tools,
        config=loop.LoopConfig(**config),
        deps=loop.LoopDeps(call_model=model, clock=clock),
        permissions=permissions or PermissionPolicy(mode=PermissionMode.DONT_ASK),
        can_use_tool=can_use_tool,
        hooks=settings,
    )
    return loop.query(params), model


def last_user_text(request: ModelRequest) -> str:
    return "".join(
        b.get("text", "") for b in request.body["messages"][-1]["content"] if b.get("type") == "text"
    )


# --- Stop ------------------------------------------------------------------------------------


async def test_a_stop_hook_that_always_blocks_ends_after_the_cap(tmp_path: Path) -> None:
    always = script(tmp_path, "always.sh", "cat > /dev/null\necho 'tests fail: 2 errors' >&2\nexit 2\n")
    run, model = hooked_run(
        [FakeResponse.of(text(f"done {n}")) for n in range(4)], command_hooks("Stop", always)
    )
    assert await run.wait() == StopHookLimit(3, ("tests fail: 2 errors",))
    assert model.calls() == 4
    assert run.state.transitions == (StopHookBlocking(("tests fail: 2 errors",)),) * 3
    assert "tests fail: 2 errors" in last_user_text(model.requests[1])
    assert run.messages[-1] == {"role": "assistant", "content": [text("done 3")]}  # the answer is kept
    assert pairing_violations(run.messages) == []


async def test_the_cap_is_configurable(tmp_path: Path) -> None:
    always = script(tmp_path, "always.sh", "echo no >&2\nexit 2\n")
    run, model = hooked_run([FakeResponse.of(text("a")), FakeResponse.of(text("b"))], command_hooks("Stop", always),
                            max_stop_hook_blocks=1)  # fmt: skip
    assert await run.wait() == StopHookLimit(1, ("no",)) and model.calls() == 2


async def test_the_canonical_script_lets_the_model_stop_once_it_continued(tmp_path: Path) -> None:
    # The pattern Claude Code's docs recommend: block unless stop_hook_active is already true.
    lint = script(
        tmp_path,
        "lint.sh",
        f"active=$({READ_FIELD.format(field='stop_hook_active')})\n"
        'if [ "$active" = "True" ]; then exit 0; fi\n'
        "echo 'run the linter first' >&2\nexit 2\n",
    )
    run, model = hooked_run(
        [FakeResponse.of(text("done")), FakeResponse.of(text("linted"))], command_hooks("Stop", lint)
    )
    assert await run.wait() == Completed("end_turn")
    assert run.state.transitions == (StopHookBlocking(("run the linter first",)),)
    assert model.calls() == 2 and run.state.stop_hook_active


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('{"continue": false, "stopReason": "out of credits"}', StopHookPrevented("out of credits")),
        ('{"decision": "block", "reason": "add a test"}', StopHookBlocking(("add a test",))),
    ],
)
async def test_json_answers_of_stop_hooks(tmp_path: Path, answer: str, expected: object) -> None:
    hook = script(tmp_path, "hook.sh", f"cat > /dev/null\necho '{answer}'\n")
    run, _ = hooked_run(
        [FakeResponse.of(text("a")), FakeResponse.of(text("b"))],
        command_hooks("Stop", hook),
        max_stop_hook_blocks=1,
    )
    terminal = await run.wait()
    if isinstance(expected, StopHookPrevented):
        assert terminal == expected
    else:
        assert run.state.transitions == (expected,)


async def test_stop_hooks_see_claude_codes_input_and_never_run_after_an_api_error(tmp_path: Path) -> None:
    seen = tmp_path / "seen.jsonl"
    record = script(tmp_path, "record.sh", f'input=$(cat)\necho "$input" >> {seen}\n'
                    f'path=$(echo "$input" | {READ_FIELD.format(field="transcript_path")})\ncat "$path" > {tmp_path}/transcript\n')  # fmt: skip
    hooks = HookSettings.from_json({"hooks": command_hooks("Stop", record)}, cwd=tmp_path)
    run, _ = hooked_run([FakeResponse.of(text("All done."))], hooks, permissions=PermissionPolicy())
    await run.wait()
    (data,) = [json.loads(line) for line in seen.read_text().splitlines()]
    assert data["hook_event_name"] == "Stop" and data["stop_hook_active"] is False
    assert data["last_assistant_message"] == "All done."
    assert data["cwd"] == str(tmp_path) and data["permission_mode"] == "default" and data["session_id"]
    transcript = [json.loads(line) for line in (tmp_path / "transcript").read_text().splitlines()]
    assert [(t["type"], t["message"]["content"][0]["text"]) for t in transcript] == [
        ("user", "do the task"),
        ("assistant", "All done."),
    ]
    assert not await asyncio.to_thread(Path(data["transcript_path"]).exists)  # removed when the run ended
    seen.unlink()
    errored, _ = hooked_run([FakeResponse.http_error(529, "overloaded_error")], command_hooks("Stop", record))
    assert isinstance(await errored.wait(), ModelError) and not seen.exists()


# --- PreToolUse / PostToolUse ------------------------------------------------------------------


def tool_script() -> list[FakeResponse]:
    return [FakeResponse.of(tool_use("write", {"path": "a.txt"}), tool_use("read", {"path": "b"})),
            FakeResponse.of(text("finished"))]  # fmt: skip


def results(run: loop.Run) -> dict[str, dict[str, Any]]:
    return {b["tool_use_id"]: b for b in run.messages[2]["content"]}


async def test_exit_2_blocks_a_tool_call_with_stderr_as_the_reason(tmp_path: Path) -> None:
    guard = script(tmp_path, "guard.sh", f'tool=$({READ_FIELD.format(field="tool_name")})\n'
                   'echo "$tool writes are not allowed here" >&2\nexit 2\n')  # fmt: skip
    write, read = FakeTool("write", read_only=False), FakeTool("read")
    run, _ = hooked_run(
        tool_script(), command_hooks("PreToolUse", guard, matcher="write"), tools=(write, read)
    )
    assert await run.wait() == Completed("end_turn")
    assert write.calls == [] and len(read.calls) == 1
    blocked = results(run)["toolu_fake_1_0"]
    assert (
        blocked["is_error"]
        and blocked["content"] == "A PreToolUse hook denied the write call: write writes are not allowed here"
    )
    assert run.state.transitions == (NextTurn(2),)


def pre_answer(**specific: Any) -> str:
    return json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", **specific}})


async def test_pre_tool_use_json_deny_and_rewritten_input(tmp_path: Path) -> None:
    deny = script(
        tmp_path,
        "deny.sh",
        f"echo '{pre_answer(permissionDecision='deny', permissionDecisionReason='secrets')}'\n",
    )
    rewrite = script(tmp_path, "rewrite.sh", f"echo '{pre_answer(updatedInput={'path': 'safe/b'})}'\n")
    hooks = {"PreToolUse": [{"matcher": "write", "hooks": [{"type": "command", "command": deny}]},
                            {"matcher": "read", "hooks": [{"type": "command", "command": rewrite}]}]}  # fmt: skip
    write, read = FakeTool("write", read_only=False), FakeTool("read")
    run, _ = hooked_run(tool_script(), hooks, tools=(write, read))
    await run.wait()
    assert write.calls == [] and results(run)["toolu_fake_1_0"]["content"].endswith("write call: secrets")
    assert [c.input for c in read.calls] == [{"path": "safe/b"}]


async def test_allow_answers_whoever_would_be_asked_but_not_deny_rules(tmp_path: Path) -> None:
    allow = script(tmp_path, "allow.sh", f"echo '{pre_answer(permissionDecision='allow')}'\n")
    write = FakeTool("write", read_only=False, destructive=True)
    read = FakeTool("read")
    policy = PermissionPolicy(mode=PermissionMode.DEFAULT, deny=(PermissionRule(tool="read"),))
    run, _ = hooked_run(
        tool_script(), command_hooks("PreToolUse", allow), tools=(write, read), permissions=policy
    )
    await run.wait()
    assert len(write.calls) == 1  # nobody could have been asked: the hook's allow let it run
    assert read.calls == [] and "denied by rule" in results(run)["toolu_fake_1_1"]["content"]


async def test_ask_consults_the_callback_even_where_the_mode_allows(tmp_path: Path) -> None:
    ask = script(
        tmp_path,
        "ask.sh",
        f"echo '{pre_answer(permissionDecision='ask', permissionDecisionReason='big write')}'\n",
    )
    asked: list[str] = []

    async def user(request: PermissionRequest) -> PermissionVerdict:
        asked.append(request.tool_name)
        return PermissionVerdict(
            request.tool_name == "read", "said no" if request.tool_name != "read" else "ok"
        )

    write, read = FakeTool("write", read_only=False), FakeTool("read")
    policy = PermissionPolicy(mode=PermissionMode.BYPASS_PERMISSIONS)
    run, _ = hooked_run(tool_script(), command_hooks("PreToolUse", ask), tools=(write, read), permissions=policy,
                        can_use_tool=user)  # fmt: skip
    await run.wait()
    assert sorted(asked) == ["read", "write"]
    assert (
        write.calls == [] and "said no" in results(run)["toolu_fake_1_0"]["content"] and len(read.calls) == 1
    )


async def test_post_tool_use_annotates_or_replaces_results(tmp_path: Path) -> None:
    lint = script(tmp_path, "lint.sh", "echo 'lint: 3 warnings' >&2\nexit 2\n")
    replace = script(tmp_path, "replace.sh",
                     """echo '{"hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedMCPToolOutput": "[redacted]"}}'\n""")  # fmt: skip
    hooks = {"PostToolUse": [{"matcher": "write", "hooks": [{"type": "command", "command": lint}]},
                             {"matcher": "read", "hooks": [{"type": "command", "command": replace}]}]}  # fmt: skip
    write, read = (
        FakeTool("write", read_only=False, result="wrote 3 lines"),
        FakeTool("read", result="SECRET=1"),
    )
    run, _ = hooked_run(tool_script(), hooks, tools=(write, read))
    await run.wait()
    answered = results(run)
    assert (
        answered["toolu_fake_1_0"]["content"]
        == "wrote 3 lines\n\nPostToolUse hook feedback:\nlint: 3 warnings"
    )
    assert answered["toolu_fake_1_1"]["content"] == "[redacted]"


async def test_post_tool_use_does_not_run_after_a_failed_call(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hook = script(tmp_path, "post.sh", f"touch {marker}\n")
    broken = FakeTool("write", read_only=False, error=RuntimeError("disk full"))
    run, _ = hooked_run(
        tool_script(), command_hooks("PostToolUse", hook, matcher="write"), tools=(broken, FakeTool("read"))
    )
    await run.wait()
    assert not marker.exists() and results(run)["toolu_fake_1_0"]["is_error"]


async def test_continue_false_from_a_tool_hook_ends_the_run_after_the_turns_tools(tmp_path: Path) -> None:
    stop = script(
        tmp_path, "stop.sh", """echo '{"continue": false, "stopReason": "budget review needed"}'\n"""
    )
    write, read = FakeTool("write", read_only=False), FakeTool("read")
    run, model = hooked_run(
        tool_script(), command_hooks("PreToolUse", stop, matcher="write"), tools=(write, read)
    )
    assert await run.wait() == HookStopped("PreToolUse", "budget review needed")
    assert model.calls() == 1 and write.calls == [] and len(read.calls) == 1
    assert pairing_violations(run.messages) == []


async def test_python_callbacks_in_claude_agent_sdk_style() -> None:
    seen: list[tuple[str, str | None, str]] = []

    async def no_secrets(data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        seen.append((data["tool_name"], tool_use_id, context.event))
        if data["tool_input"].get("path") == "a.txt":
            return {
                "hookSpecificOutput": {"permissionDecision": "deny", "permissionDecisionReason": "protected"}
            }
        return {}

    hooks = HookSettings.of({"PreToolUse": [HookMatcher(None, (PythonHook(no_secrets),))]})
    write, read = FakeTool("write", read_only=False), FakeTool("read")
    run, _ = hooked_run(tool_script(), hooks, tools=(write, read))
    await run.wait()
    assert sorted(seen) == [
        ("read", "toolu_fake_1_1", "PreToolUse"),
        ("write", "toolu_fake_1_0", "PreToolUse"),
    ]
    assert write.calls == [] and len(read.calls) == 1


# --- errors and timeouts -----------------------------------------------------------------------


async def test_other_exit_codes_and_timeouts_are_non_blocking(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    crash = script(tmp_path, "crash.sh", "echo 'jq: command not found' >&2\nexit 127\n")
    slow = script(tmp_path, "slow.sh", "sleep 30\nexit 2\n")
    hooks = {"PreToolUse": [{"hooks": [{"type": "command", "command": crash},
                                       {"type": "command", "command": slow, "timeout": 0.3}]}]}  # fmt: skip
    write, read = FakeTool("write", read_only=False), FakeTool("read")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, "switchyard.loop.hooks"):
        run, _ = hooked_run(tool_script(), hooks, tools=(write, read))
        assert await run.wait() == Completed("end_turn")
    assert time.monotonic() - started < 10  # two 0.3 s timeouts, not two 30 s sleeps
    assert len(write.calls) == 1 and len(read.calls) == 1
    assert "exited with 127: jq: command not found" in caplog.text and "timed out after 0.3s" in caplog.text


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie no one reaped yet is dead


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


async def test_exit_2_blocks_at_once_though_a_background_child_holds_the_pipes(tmp_path: Path) -> None:
    # The hook waited for its pipes' EOF, held by the background sleep: it timed out, the block
    # was ignored, the tool ran and the sleep outlived the run.
    pid_file = tmp_path / "child.pid"
    command = f"sleep 30 & echo $! > {pid_file}; echo 'blocked by policy' >&2; exit 2"
    write, read = FakeTool("write", read_only=False), FakeTool("read")
    started = time.monotonic()
    run, _ = hooked_run(
        tool_script(), command_hooks("PreToolUse", command, matcher="write", timeout=5), tools=(write, read)
    )
    assert await run.wait() == Completed("end_turn")
    assert time.monotonic() - started < 4
    assert write.calls == [] and len(read.calls) == 1
    assert results(run)["toolu_fake_1_0"]["content"] == "A PreToolUse hook denied the write call: blocked by policy"
    assert gone_within(int(pid_file.read_text()), 3)


async def test_a_python_hook_times_out_on_the_loops_clock(caplog: pytest.LogCaptureFixture) -> None:
    async def stuck(data: dict[str, Any], tool_use_id: str | None, context: Any) -> dict[str, Any]:
        await context.clock.sleep(3_600)
        return {"continue": False}

    hooks = HookSettings.of({"Stop": [HookMatcher(None, (PythonHook(stuck, timeout_s=5),))]})
    with caplog.at_level(logging.WARNING, "switchyard.loop.hooks"):
        run, _ = hooked_run([FakeResponse.of(text("ok"))], hooks)
        assert await run.wait() == Completed("end_turn")
    assert "timed out after 5s" in caplog.text


# --- the run's lifecycle -------------------------------------------------------------------------


async def test_user_prompt_submit_can_refuse_the_prompt(tmp_path: Path) -> None:
    gate = script(tmp_path, "gate.sh", f'prompt=$({READ_FIELD.format(field="prompt")})\n'
                  'echo "prompt refused: $prompt" >&2\nexit 2\n')  # fmt: skip
    run, model = hooked_run([], command_hooks("UserPromptSubmit", gate), prompt="delete prod")
    assert await run.wait() == HookStopped("UserPromptSubmit", "prompt refused: delete prod")
    assert model.calls() == 0


async def test_session_start_and_prompt_context_and_session_end(tmp_path: Path) -> None:
    ended = tmp_path / "ended"
    hooks = {
        **command_hooks("SessionStart", "echo 'branch: main'", matcher="startup"),
        **command_hooks("UserPromptSubmit", "echo '" + json.dumps(
            {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "ticket ABC-1"}}) + "'"),
        **command_hooks("SessionEnd", f"{READ_FIELD.format(field='reason')} > {ended}"),
    }  # fmt: skip
    run, model = hooked_run([FakeResponse.of(text("ok"))], hooks)
    assert await run.wait() == Completed("end_turn")
    sent = model.requests[0].body["messages"]
    assert [b["text"] for b in sent[0]["content"]] == [
        "do the task",
        "<hook-context>\nbranch: main\n</hook-context>",
        "<hook-context>\nticket ABC-1\n</hook-context>",
    ]
    assert ended.read_text() == "other\n"


async def test_pre_compact_runs_before_summarisation_calls_only(tmp_path: Path) -> None:
    log = tmp_path / "compacts"
    hooks = HookSettings.from_json({"hooks": command_hooks("PreCompact", f"{READ_FIELD.format(field='trigger')} >> {log}", matcher="auto")})  # fmt: skip
    model = FakeModel([FakeResponse.of(text("summary")), FakeResponse.of(text("answer"))])
    runner = HookRunner(hooks, caller=model, clock=VirtualClock(), model="m", permission_mode="default")
    caller = PreCompactCaller(model, runner)
    for source in ("compact", "sdk"):
        request = ModelRequest(body={"messages": []}, betas=(), request_id="r", source=source)
        assert [e["type"] async for e in caller(request)][-1] == "message_stop"
    assert log.read_text() == "auto\n"
    runner.close()


# --- the model judges ----------------------------------------------------------------------------


async def test_a_prompt_judge_is_one_small_model_call() -> None:
    hooks = HookSettings.of(
        {"Stop": [HookMatcher(None, (loop.hooks.PromptHook("Did it add tests? $ARGUMENTS"),))]}
    )
    script_ = [
        FakeResponse.of(text("done")),
        FakeResponse.of(text('Verdict: {"ok": false, "reason": "no tests were added"}')),
        FakeResponse.of(text("added tests")),
        FakeResponse.of(text('{"ok": true}')),
    ]
    run, model = hooked_run(script_, hooks)
    assert await run.wait() == Completed("end_turn")
    assert run.state.transitions == (StopHookBlocking(("no tests were added",)),)
    assert run.state.usage.input_tokens == 4 * 100  # the judge's two calls are billed to the run too
    judge = model.requests[1]
    assert judge.source == "hook" and judge.body["model"] == JUDGE_MODEL and "tools" not in judge.body
    assert judge.body["system"][0]["text"] == JUDGE_SYSTEM
    assert '"hook_event_name":"Stop"' in last_user_text(judge) and last_user_text(judge).startswith(
        "Did it add tests? {"
    )


async def test_an_agent_judge_runs_a_nested_loop_with_read_only_tools() -> None:
    hooks = HookSettings.of({"Stop": [HookMatcher(None, (loop.hooks.AgentHook("Is notes.txt written?"),))]})
    look, write = FakeTool("look", result="notes.txt: missing"), FakeTool("write", read_only=False)
    script_ = [
        FakeResponse.of(text("done")),
        FakeResponse.of(tool_use("look", {"path": "notes.txt"})),  # the judge looks
        FakeResponse.of(text('{"ok": false, "reason": "notes.txt is missing"}')),
        FakeResponse.of(text("I wrote it")),
        FakeResponse.of(text('{"ok": true}')),
    ]
    run, model = hooked_run(script_, hooks, tools=(look, write), max_stop_hook_blocks=1)
    assert await run.wait() == Completed("end_turn")
    assert run.state.transitions == (StopHookBlocking(("notes.txt is missing",)),)
    assert [c.input for c in look.calls] == [{"path": "notes.txt"}] and write.calls == []
    judge_tools = {t["name"] for t in model.requests[1].body["tools"]}
    assert "look" in judge_tools and "write" not in judge_tools
    assert model.requests[1].source == "agent:hook-judge"
    assert run.state.usage.input_tokens == 5 * 100


async def test_session_end_runs_when_the_run_is_aborted() -> None:
    ended: list[str] = []

    async def on_end(data: dict[str, Any], tool_use_id: str | None, context: Any) -> None:
        ended.append(data["reason"])

    hooks = HookSettings.of({"SessionEnd": [HookMatcher(None, (PythonHook(on_end),))]})
    run, _ = hooked_run([FakeResponse.of(text("a long answer"))], hooks)
    async with run:
        async for _event in run:
            break
    assert run.terminal == loop.AbortedStreaming(turn=1) and ended == ["other"]


async def test_blocks_a_post_tool_use_hook_substitutes_are_checked(tmp_path: Path) -> None:
    """A hook's replacement blocks enter the history as a tool's would: an empty text block (the
    API refuses it) is dropped, a block missing its text is sent as its JSON."""
    output = '[{"type": "text", "text": ""}, {"type": "text"}, {"type": "text", "text": "kept"}]'
    replace = script(tmp_path, "replace.sh",
                     f"""echo '{{"hookSpecificOutput": {{"hookEventName": "PostToolUse", "updatedMCPToolOutput": {output}}}}}'\n""")  # fmt: skip
    hooks = {"PostToolUse": [{"matcher": "read", "hooks": [{"type": "command", "command": replace}]}]}
    run, _ = hooked_run(tool_script(), hooks, tools=(FakeTool("write", read_only=False), FakeTool("read")))
    await run.wait()
    content = results(run)["toolu_fake_1_1"]["content"]
    assert content == [{"type": "text", "text": '{"type":"text"}'}, {"type": "text", "text": "kept"}]


async def test_a_command_hooks_output_is_kept_to_a_bound(tmp_path: Path) -> None:
    """A hook printing without end is read to its exit and cut at ``MAX_OUTPUT_BYTES`` per stream:
    a JSON answer longer than that arrives cut (and is reported as invalid), memory stays bounded."""
    from loop.hooks.handlers import MAX_OUTPUT_BYTES, run_command
    from loop.hooks.settings import CommandHook

    size = MAX_OUTPUT_BYTES + 4096
    command = f"""printf '{{"systemMessage": "'; head -c {size} /dev/zero | tr '\\0' a; printf '"}}'"""
    answer = await run_command(CommandHook(command=command), b"{}", cwd=str(tmp_path), timeout_s=20)
    assert answer.error is not None and "invalid JSON" in answer.error
    small = """printf '{"systemMessage": "'; head -c 1000 /dev/zero | tr '\\0' a; printf '"}'"""
    answer = await run_command(CommandHook(command=small), b"{}", cwd=str(tmp_path), timeout_s=20)
    assert not answer.error and answer.system_message == "a" * 1000
