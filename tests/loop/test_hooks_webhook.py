"""HTTP hooks against a real aiohttp server on loopback: the POSTed input, JSON answers, header
variables, and the failures that must not block (an error status, a timeout)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from loop.hooks import HookSettings
from loop.testing import FakeResponse, FakeTool, text, tool_use
from loop.transitions import Completed, StopHookBlocking
from tests.loop.test_hooks_runs import hooked_run, results, tool_script


class HookServer:
    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        self.answers: dict[str, list[Any]] = {}
        self.released = asyncio.Event()
        """Set at teardown: a slow answer stops waiting then."""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.received.append((request.path, body, dict(request.headers)))
        answer = self.answers.get(request.path, [{}])
        value = answer.pop(0) if len(answer) > 1 else answer[0]
        if isinstance(value, int):
            return web.Response(status=value, text="nope")
        if isinstance(value, float):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.released.wait(), value)
            return web.json_response({"continue": False})
        return web.json_response(value)


@pytest.fixture
async def hook_server() -> AsyncIterator[tuple[HookServer, str]]:
    server = HookServer()
    app = web.Application()
    app.router.add_post("/{name}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield server, f"http://127.0.0.1:{port}"
    finally:
        server.released.set()
        await runner.cleanup()


def http_hooks(event: str, url: str, *, matcher: str | None = None, **fields: Any) -> dict[str, Any]:
    group: dict[str, Any] = {"hooks": [{"type": "http", "url": url, **fields}]}
    if matcher is not None:
        group["matcher"] = matcher
    return {event: [group]}


async def test_a_webhook_denies_a_tool_call(hook_server: tuple[HookServer, str]) -> None:
    server, base = hook_server
    server.answers["/pre"] = [
        {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                "permissionDecisionReason": "change freeze until Monday"}}
    ]  # fmt: skip
    hooks = http_hooks(
        "PreToolUse", f"{base}/pre", matcher="write",
        headers={"Authorization": "Bearer ${HOOK_TOKEN}", "X-Other": "$SECRET"}, allowedEnvVars=["HOOK_TOKEN"],
    )  # fmt: skip
    settings = HookSettings.from_json({"hooks": hooks}, environ={"HOOK_TOKEN": "t0k", "SECRET": "s3cret"})
    write, read = FakeTool("write", read_only=False), FakeTool("read")
    run, _ = hooked_run(tool_script(), settings, tools=(write, read))
    assert await run.wait() == Completed("end_turn")
    assert write.calls == [] and len(read.calls) == 1
    assert results(run)["toolu_fake_1_0"]["content"].endswith("write call: change freeze until Monday")
    ((path, body, headers),) = server.received
    assert path == "/pre" and body["hook_event_name"] == "PreToolUse"
    assert (body["tool_name"], body["tool_input"], body["tool_use_id"]) == (
        "write",
        {"path": "a.txt"},
        "toolu_fake_1_0",
    )
    assert headers["Authorization"] == "Bearer t0k" and headers["X-Other"] == ""  # SECRET is not allowed
    assert headers["Content-Type"] == "application/json"


async def test_a_webhook_blocks_a_stop_then_lets_it_go(hook_server: tuple[HookServer, str]) -> None:
    server, base = hook_server
    server.answers["/stop"] = [{"decision": "block", "reason": "the changelog is not updated"}, {}]
    run, model = hooked_run(
        [FakeResponse.of(text("done")), FakeResponse.of(text("updated"))], http_hooks("Stop", f"{base}/stop")
    )
    assert await run.wait() == Completed("end_turn")
    assert run.state.transitions == (StopHookBlocking(("the changelog is not updated",)),)
    assert [body["stop_hook_active"] for _, body, _ in server.received] == [False, True]
    assert model.calls() == 2


async def test_error_statuses_and_timeouts_do_not_block(
    hook_server: tuple[HookServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    server, base = hook_server
    server.answers["/broken"] = [503]
    server.answers["/slow"] = [5.0]
    hooks = {"PreToolUse": [{"hooks": [{"type": "http", "url": f"{base}/broken"},
                                       {"type": "http", "url": f"{base}/slow", "timeout": 0.3}]}]}  # fmt: skip
    write = FakeTool("write", read_only=False)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, "switchyard.loop.hooks"):
        run, _ = hooked_run(
            [FakeResponse.of(tool_use("write", {})), FakeResponse.of(text("ok"))], hooks, tools=(write,)
        )
        assert await run.wait() == Completed("end_turn")
    assert time.monotonic() - started < 4  # the 5 s answer was not waited for
    assert len(write.calls) == 1
    assert "webhook answered HTTP 503" in caplog.text and "webhook timed out after 0.3s" in caplog.text
    assert base not in caplog.text  # the URL is never logged


async def test_an_unreachable_webhook_is_a_logged_error(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "switchyard.loop.hooks"):
        run, _ = hooked_run(
            [FakeResponse.of(text("ok"))], http_hooks("Stop", "http://127.0.0.1:9/stop", timeout=2)
        )
        assert await run.wait() == Completed("end_turn")
    assert "the hook webhook failed: Client" in caplog.text
