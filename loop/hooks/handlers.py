"""Running one command, HTTP or Python hook under its timeout; never raises (but cancellation).

A command runs through ``/bin/sh -c`` in the hooks' working directory, in its own process group,
with ``CLAUDE_PROJECT_DIR`` set as Claude Code sets it; the input JSON is its stdin. Its exit code
decides as soon as the shell exits (a background child holding its stdout does not delay it), and
the group is then killed whole, as at the timeout or a cancellation: nothing it started survives.
Timeouts of commands and webhooks are wall-clock (real I/O); a Python callback's runs on the
loop's injected clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import re
import signal
from collections.abc import Mapping
from typing import Any

import aiohttp

from loop.hooks.context import HookContext
from loop.hooks.output import HookOutput, cut, from_json, from_stdout
from loop.hooks.settings import CommandHook, HttpHook, PythonHook

log = logging.getLogger("switchyard.loop.hooks")

BLOCKING_EXIT_CODE = 2
OUTPUT_GRACE_S = 1.0
"""How long the hook's output is still read after its shell exited (and its group was killed)."""
MAX_OUTPUT_BYTES = 1 << 20
"""What is kept of each of a hook's stdout and stderr (a hook printing without end is cut here)."""
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


async def run_command(hook: CommandHook, payload: bytes, *, cwd: str, timeout_s: float) -> HookOutput:
    try:
        transport, protocol = await asyncio.get_running_loop().subprocess_shell(
            _CommandProtocol,
            hook.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env={**os.environ, "CLAUDE_PROJECT_DIR": cwd},
            start_new_session=True,
        )
    except OSError as exc:
        return HookOutput(error=f"the hook command could not start: {exc.strerror or exc}")
    timed_out = False
    try:
        stdin = transport.get_pipe_transport(0)
        if isinstance(stdin, asyncio.WriteTransport):
            stdin.write(payload)
            stdin.close()  # after the buffered input is written
        try:
            async with asyncio.timeout(timeout_s):
                await protocol.exited.wait()  # the shell's exit decides, not the pipes' EOF
        except TimeoutError:
            timed_out = True
        finally:
            _kill_group(transport.get_pid())  # what it left running in the background too
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(OUTPUT_GRACE_S):
                await protocol.drained.wait()
    finally:
        transport.close()
    if timed_out:
        return HookOutput(error=f"the hook command timed out after {timeout_s:g}s")
    returncode = transport.get_returncode()
    out, err = (bytes(protocol.output[fd]).decode(errors="replace") for fd in (1, 2))
    if returncode == 0:
        return from_stdout(out)
    if returncode == BLOCKING_EXIT_CODE:
        return HookOutput(blocked=True, reason=cut(err) or "blocked by a hook (exit code 2)")
    return HookOutput(error=f"the hook command exited with {returncode}: {cut(err)[:500]}")


class _CommandProtocol(asyncio.SubprocessProtocol):
    """Collects a hook command's output and tells when its shell exited (``Process.wait`` waits
    for the pipes' EOF too, which a background child holding them delays)."""

    def __init__(self) -> None:
        self.output = {1: bytearray(), 2: bytearray()}
        self.exited = asyncio.Event()
        self.drained = asyncio.Event()
        self._open = {1, 2}

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        kept = self.output.get(fd)
        if kept is not None and len(kept) < MAX_OUTPUT_BYTES:  # the rest is read and dropped
            kept += (data.encode() if isinstance(data, str) else data)[: MAX_OUTPUT_BYTES - len(kept)]

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open.discard(fd)
        if not self._open:
            self.drained.set()

    def process_exited(self) -> None:
        self.exited.set()


def _kill_group(pid: int) -> None:
    """SIGKILL the hook's whole process group (its shell may have exited already; its background
    children are still in the group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def run_http(
    hook: HttpHook, payload: bytes, *, environ: Mapping[str, str], timeout_s: float
) -> HookOutput:
    headers = {"Content-Type": "application/json"}
    headers.update(
        {name: _expand(value, hook.allowed_env_vars, environ) for name, value in hook.headers.items()}
    )
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
            session.post(hook.url, data=payload, headers=headers, allow_redirects=False) as response,
        ):
            body = await response.text(errors="replace")
            status = response.status
    except TimeoutError:
        return HookOutput(error=f"the hook webhook timed out after {timeout_s:g}s")
    except aiohttp.ClientError as exc:
        return HookOutput(error=f"the hook webhook failed: {type(exc).__name__}")
    if not 200 <= status < 300:
        return HookOutput(error=f"the hook webhook answered HTTP {status}")
    return from_stdout(body)


def _expand(value: str, allowed: tuple[str, ...], environ: Mapping[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return environ.get(name, "") if name in allowed else ""

    return _ENV_REFERENCE.sub(replace, value)


async def run_python(
    hook: PythonHook, data: dict[str, Any], tool_use_id: str | None, context: HookContext, *, timeout_s: float
) -> HookOutput:
    try:
        async with context.clock.timeout(timeout_s):
            answer: Any = hook.function(data, tool_use_id, context)
            if inspect.isawaitable(answer):
                answer = await answer
    except TimeoutError:
        return HookOutput(error=f"the hook function timed out after {timeout_s:g}s")
    except Exception as exc:
        log.debug("hook function %r failed", hook.function, exc_info=exc)
        return HookOutput(error=f"the hook function raised {type(exc).__name__}: {cut(str(exc))[:500]}")
    return from_json(answer)
