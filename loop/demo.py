"""The agent-loop part of ``python -m bench.demo``: an agent that reads a file, edits it and finishes.

``run_agent_demo(base_url, api_key)`` runs the loop with the built-in ``read_file`` and
``edit_file`` tools over a scratch workspace, through the official SDK against ``base_url`` (the
gateway, in front of the emulator). The emulator's scripted ``agent`` scenario calls the tools
named by ``[[tools:read_file,edit_file]]`` in order, building each input from the tool schema's
required properties (``examples`` first), so the demo's tool schemas carry examples naming the
scratch file and the exact text to replace: the edit really happens. The system prompt is long
enough to be cached, and the loop places its breakpoints, so turns after the first read the
prefix from the cache. Returns one usage row per model turn.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from loop.config import LoopConfig
from loop.deps import LoopDeps
from loop.events import AssistantMessage
from loop.query import QueryParams, query
from loop.tools.builtin import EditFile, EditFileInput, ReadFile, ReadFileInput, Workspace
from loop.tools.permissions import PermissionMode, PermissionPolicy
from loop.transitions import Terminal

DEMO_FILE = "notes.md"
DEMO_BEFORE = "# Release checklist\n\n- [ ] update the changelog\n- status: TODO\n"
OLD_TEXT = "status: TODO"
NEW_TEXT = "status: DONE"
DEMO_PROMPT = (
    f"[[scenario:agent]] [[tools:read_file,edit_file]] Read {DEMO_FILE}, then mark its status as done."
)
_GUIDELINES = (
    "Read the file before you change it. Replace the smallest exact span that makes the change, "
    "and include enough context for the replaced text to be unique. Report what you changed. "
)
DEMO_SYSTEM = "You are a careful agent editing a small project.\n" + _GUIDELINES * 70


class _DemoReadInput(ReadFileInput):
    path: str = Field(description="File path, relative to the workspace root", examples=[DEMO_FILE])


class _DemoEditInput(EditFileInput):
    path: str = Field(description="File path, relative to the workspace root", examples=[DEMO_FILE])
    old_string: str = Field(description="The exact text to replace (unique in the file)", examples=[OLD_TEXT])
    new_string: str = Field(description="The replacement text", examples=[NEW_TEXT])


class _DemoReadFile(ReadFile):
    input_model = _DemoReadInput


class _DemoEditFile(EditFile):
    input_model = _DemoEditInput


@dataclass(frozen=True, slots=True)
class UsageRow:
    turn: int
    input_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int
    output_tokens: int
    stop_reason: str | None


@dataclass(frozen=True, slots=True)
class AgentDemoResult:
    rows: tuple[UsageRow, ...]
    terminal: Terminal
    file_before: str
    file_after: str

    @property
    def edited(self) -> bool:
        return self.file_before != self.file_after and NEW_TEXT in self.file_after

    def table(self) -> str:
        lines = [f"{'turn':>4} {'input':>7} {'cache read':>10} {'cache write':>11} {'output':>7}  stop"]
        for row in self.rows:
            lines.append(
                f"{row.turn:>4} {row.input_tokens:>7} {row.cache_read_input_tokens:>10} "
                f"{row.cache_creation_input_tokens:>11} {row.output_tokens:>7}  {row.stop_reason}"
            )
        return "\n".join(lines)


async def run_agent_demo(
    base_url: str, api_key: str, *, model: str = "claude-sonnet-4-6", workspace: Path | None = None
) -> AgentDemoResult:
    """Run the demo agent against ``base_url`` (a scratch workspace unless one is given)."""
    if workspace is None:
        with tempfile.TemporaryDirectory(prefix="switchyard-agent-demo-") as scratch:
            return await _run(base_url, api_key, model, Path(scratch))
    return await _run(base_url, api_key, model, workspace)


async def _run(base_url: str, api_key: str, model: str, root: Path) -> AgentDemoResult:
    target = root / DEMO_FILE
    target.write_text(DEMO_BEFORE, encoding="utf-8")
    workspace = Workspace(root)
    rows: list[UsageRow] = []
    from loop.callers.sdk import SdkModelCaller  # the sdk extra: imported when the demo runs

    async with SdkModelCaller(base_url, api_key, max_retries=0) as caller:
        run = query(
            QueryParams(
                messages=DEMO_PROMPT,
                system=DEMO_SYSTEM,
                tools=[_DemoReadFile(workspace), _DemoEditFile(workspace)],
                config=LoopConfig(model=model, max_turns=6, stream_events=False),
                deps=LoopDeps(call_model=caller),
                permissions=PermissionPolicy(mode=PermissionMode.ACCEPT_EDITS),
            )
        )
        async with run:
            async for event in run:
                if isinstance(event, AssistantMessage):
                    usage = event.usage
                    rows.append(
                        UsageRow(
                            turn=event.turn,
                            input_tokens=usage.input_tokens,
                            cache_read_input_tokens=usage.cache_read_input_tokens,
                            cache_creation_input_tokens=usage.cache_creation_input_tokens,
                            output_tokens=usage.output_tokens,
                            stop_reason=event.stop_reason,
                        )
                    )
    return AgentDemoResult(tuple(rows), run.terminal, DEMO_BEFORE, target.read_text(encoding="utf-8"))
