"""The dispatcher, the single security boundary: one tool_result per call, whatever happens."""

from __future__ import annotations

import asyncio
import errno

import orjson
import pytest
from pydantic import BaseModel, Field

from loop.messages import JSONObject
from loop.outcome import ToolUse
from loop.testing import FakeTool, VirtualClock
from loop.testing.fake_tools import AnyInput
from loop.tools import (
    PermissionMode,
    PermissionPolicy,
    PermissionRequest,
    PermissionVerdict,
    Tool,
    ToolContext,
    ToolError,
)
from loop.tools.dispatcher import ToolDispatcher
from loop.tools.registry import ToolRegistry


class PathInput(BaseModel):
    path: str = Field(min_length=1)
    count: int = 1


def dispatcher(*tools: FakeTool, clock: VirtualClock | None = None, **options: object) -> ToolDispatcher:
    return ToolDispatcher(ToolRegistry(tools), clock=clock or VirtualClock(), **options)  # type: ignore[arg-type]


async def test_a_call_is_wrapped_as_a_tool_result_with_its_id() -> None:
    tool = FakeTool("read", result="body")
    result = await dispatcher(tool).dispatch(ToolUse("toolu_9", "read", {"a": 1}), turn=1)
    assert result == {"type": "tool_result", "tool_use_id": "toolu_9", "content": "body"}
    assert tool.calls[0].tool_use_id == "toolu_9" and tool.calls[0].input == {"a": 1}


async def test_unknown_tool_names_the_available_ones() -> None:
    result = await dispatcher(FakeTool("read"), FakeTool("write")).dispatch(ToolUse("t", "reed", {}), turn=1)
    assert result["is_error"] is True
    assert result["content"] == "Unknown tool 'reed'. Available tools: read, write."


async def test_schema_mismatch_returns_the_errors_and_the_schema() -> None:
    tool = FakeTool("read", input_model=PathInput)
    result = await dispatcher(tool).dispatch(ToolUse("t", "read", {"path": "", "count": "many"}), turn=1)
    assert result["is_error"] is True
    text = result["content"]
    assert "path: String should have at least 1 character" in text
    assert "count: Input should be a valid integer" in text
    assert orjson.dumps(PathInput.model_json_schema()).decode() in text
    assert tool.calls == []


async def test_unparseable_input_is_an_error_result() -> None:
    result = await dispatcher(FakeTool("read")).dispatch(ToolUse("t", "read", None, "not JSON"), turn=1)
    assert result == {
        "type": "tool_result",
        "tool_use_id": "t",
        "content": "Invalid input for tool 'read': not JSON.",
        "is_error": True,
    }


async def test_a_crash_becomes_an_error_result() -> None:
    tool = FakeTool("read", error=KeyError("missing"))
    result = await dispatcher(tool).dispatch(ToolUse("t", "read", {}), turn=1)
    assert result["is_error"] is True and result["content"] == "Tool 'read' failed: KeyError: 'missing'"


async def test_a_tool_error_is_reported_as_its_message() -> None:
    tool = FakeTool("read", error=ToolError("file not found: a.txt"))
    result = await dispatcher(tool).dispatch(ToolUse("t", "read", {}), turn=1)
    assert result["content"] == "file not found: a.txt" and result["is_error"] is True


async def test_timeout_on_the_injected_clock() -> None:
    clock = VirtualClock()
    tool = FakeTool("slow", duration_s=500)
    result = await dispatcher(tool, clock=clock, default_timeout_s=30).dispatch(
        ToolUse("t", "slow", {}), turn=1
    )
    assert result["content"] == "Tool 'slow' timed out after 30s." and result["is_error"] is True
    assert clock.now() == 30


async def test_a_tool_own_timeout_wins_and_a_timeout_error_raised_by_the_tool_is_a_failure() -> None:
    clock = VirtualClock()
    tool = FakeTool("slow", duration_s=10, timeout_s=5)
    result = await dispatcher(tool, clock=clock, default_timeout_s=30).dispatch(
        ToolUse("t", "slow", {}), turn=1
    )
    assert result["content"] == "Tool 'slow' timed out after 5s."
    raising = FakeTool("net", error=TimeoutError("socket timed out"))
    result = await dispatcher(raising, clock=clock).dispatch(ToolUse("t", "net", {}), turn=1)
    assert result["content"] == "Tool 'net' failed: TimeoutError: socket timed out"


async def test_long_results_are_truncated_with_a_note() -> None:
    tool = FakeTool("cat", result="x" * 1000, max_result_size_chars=100)
    result = await dispatcher(tool).dispatch(ToolUse("t", "cat", {}), turn=1)
    content = result["content"]
    assert content.startswith(
        "x" * 100 + "\n\n[Result truncated: 900 of 1000 characters omitted (limit 100)."
    )
    assert "x" * 101 not in content


async def test_destructive_calls_ask_and_a_denial_cancels() -> None:
    asked: list[PermissionRequest] = []

    async def deny(request: PermissionRequest) -> PermissionVerdict:
        asked.append(request)
        return PermissionVerdict(False, "user said no")

    tool = FakeTool("rm", read_only=False, destructive=True)
    result = await dispatcher(
        tool, policy=PermissionPolicy(mode=PermissionMode.ACCEPT_EDITS), can_use_tool=deny
    ).dispatch(ToolUse("t", "rm", {"path": "x"}), turn=1)
    assert result["is_error"] is True
    assert result["content"] == "Permission denied (user said no): the rm call was cancelled."
    assert tool.calls == [] and asked[0].tool_input == {"path": "x"} and asked[0].destructive


async def test_an_approval_runs_the_call() -> None:
    async def allow(request: PermissionRequest) -> PermissionVerdict:
        return PermissionVerdict(True)

    tool = FakeTool("rm", read_only=False, destructive=True, result="removed")
    result = await dispatcher(tool, can_use_tool=allow).dispatch(ToolUse("t", "rm", {}), turn=1)
    assert result["content"] == "removed"


async def test_cancellation_propagates() -> None:
    tool = FakeTool("slow", duration_s=1000)
    task = asyncio.create_task(dispatcher(tool).dispatch(ToolUse("t", "slow", {}), turn=1))
    await asyncio.sleep(0)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return
    raise AssertionError("cancellation was swallowed")


class Hostile(Tool[BaseModel]):
    """A tool whose ``input_paths`` or ``call`` raises what it is given."""

    name = "hostile"
    description = "raises"
    input_model = AnyInput
    read_only = True

    def __init__(
        self, *, in_paths: BaseException | None = None, in_call: BaseException | None = None
    ) -> None:
        self.in_paths = in_paths
        self.in_call = in_call

    def input_paths(self, tool_input: BaseModel) -> tuple[str, ...]:
        if self.in_paths is not None:
            raise self.in_paths
        return ("a.txt",)

    async def call(self, tool_input: BaseModel, context: ToolContext) -> str:
        if self.in_call is not None:
            raise self.in_call
        return "fine"


SECRET_DIR = "/home/someone/.ssh"


@pytest.mark.parametrize(
    ("where", "exc", "expected"),
    [
        ("paths", RuntimeError(f"Symlink loop from '{SECRET_DIR}/id_rsa'"), "RuntimeError: Symlink loop from '<path>'"),
        ("paths", OSError(errno.ELOOP, "Too many levels of symbolic links", f"{SECRET_DIR}/x"),
         "OSError: [ELOOP] Too many levels of symbolic links"),
        ("call", OSError(errno.EACCES, "Permission denied", f"{SECRET_DIR}/id_rsa"),
         "PermissionError: [EACCES] Permission denied"),
        ("call", RecursionError("maximum recursion depth exceeded"), "RecursionError: maximum recursion depth exceeded"),
        ("call", UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
         "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
        ("call", SystemExit(2), "SystemExit: 2"),
        ("call", ValueError(f"bad file {SECRET_DIR}/config and " + "x" * 600), None),
    ],
)  # fmt: skip
async def test_every_tool_exception_is_an_error_result_without_outside_paths(
    where: str, exc: BaseException, expected: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    tool = Hostile(in_paths=exc) if where == "paths" else Hostile(in_call=exc)
    result = await dispatcher(tool).dispatch(ToolUse("t", "hostile", {}), turn=1)  # type: ignore[arg-type]
    assert result["is_error"] is True
    assert SECRET_DIR not in result["content"]
    if expected is not None:
        assert result["content"] == f"Tool 'hostile' failed: {expected}"
    else:
        assert result["content"].startswith("Tool 'hostile' failed: ValueError: bad file <path> and xxx")
        assert len(result["content"]) < 600
    assert "Traceback" not in caplog.text and SECRET_DIR not in caplog.text
    assert [r.levelname for r in caplog.records if r.name == "switchyard.loop.tools"][:1] == ["ERROR"]


async def test_a_permission_callback_that_raises_is_a_denial() -> None:
    async def broken(request: PermissionRequest) -> PermissionVerdict:
        raise KeyError("oops")

    tool = FakeTool("rm", read_only=False, destructive=True)
    result = await dispatcher(tool, can_use_tool=broken).dispatch(ToolUse("t", "rm", {}), turn=1)
    assert result["is_error"] is True
    assert result["content"] == (
        "Permission denied (the permission check failed: KeyError: 'oops'): the rm call was cancelled."
    )
    assert tool.calls == []


async def test_a_schema_that_cannot_be_built_is_an_error_result() -> None:
    class BrokenSchema(FakeTool):
        def input_schema(self) -> JSONObject:
            raise RecursionError("maximum recursion depth exceeded")

    result = await dispatcher(BrokenSchema("read", input_model=PathInput)).dispatch(
        ToolUse("t", "read", {"path": ""}), turn=1
    )
    assert result["is_error"] is True
    assert (
        result["content"] == "Invalid input for tool 'read': RecursionError: maximum recursion depth exceeded"
    )


async def test_keyboard_interrupt_still_propagates() -> None:
    with pytest.raises(KeyboardInterrupt):
        await dispatcher(Hostile(in_call=KeyboardInterrupt())).dispatch(ToolUse("t", "hostile", {}), turn=1)  # type: ignore[arg-type]
