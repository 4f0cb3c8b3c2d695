"""Agent-loop metrics (``loop_*``), exported on the gateway's naming scheme.

``loop/`` calls this small API; when the loop runs in the gateway's process, pass the gateway's
registry so one ``/metrics`` serves both::

    metrics = LoopMetrics(gateway_metrics.registry)
    metrics.compaction("autocompact", "applied")
    metrics.terminal("completed")
    metrics.tool_call("Read", "ok")

Label values come from the loop's code (layers, outcomes, terminal reasons) and from tool
registries (which may include MCP tools): each label admits a bounded number of distinct,
well-formed values and counts the rest as ``other``. Never pass session, user or request ids.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, generate_latest

from gateway.metrics import BoundedLabel

MAX_REASONS = 32
MAX_TOOLS = 128


class LoopMetrics:
    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        known_tools: Iterable[str] = (),
        max_tools: int = MAX_TOOLS,
    ) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.compactions = Counter(
            "loop_compactions_total",
            "Context-management passes, by layer (snip, microcompact, autocompact...) and outcome.",
            ["layer", "outcome"],
            registry=r,
        )
        self.terminals = Counter(
            "loop_terminal_total",
            "Agent loops ended, by terminal reason (completed, max_turns, model_error...).",
            ["reason"],
            registry=r,
        )
        self.tool_calls = Counter(
            "loop_tool_calls_total",
            "Tool calls dispatched, by tool and outcome (ok, error, denied...).",
            ["tool", "outcome"],
            registry=r,
        )
        self._layer = BoundedLabel(MAX_REASONS)
        self._compaction_outcome = BoundedLabel(MAX_REASONS)
        self._tool_outcome = BoundedLabel(MAX_REASONS)
        self._reason = BoundedLabel(MAX_REASONS)
        self._tool = BoundedLabel(max_tools, known_tools)

    def compaction(self, layer: str, outcome: str) -> None:
        self.compactions.labels(self._layer(layer), self._compaction_outcome(outcome)).inc()

    def terminal(self, reason: str) -> None:
        self.terminals.labels(self._reason(reason)).inc()

    def tool_call(self, tool: str, outcome: str) -> None:
        self.tool_calls.labels(self._tool(tool), self._tool_outcome(outcome)).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
