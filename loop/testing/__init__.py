"""Deterministic testing for agents: a scripted model, a virtual clock and fake tools.

Public: ``__all__``; the modules inside are internal.
"""

from loop.testing.clock import VirtualClock, VirtualTimeout
from loop.testing.fake_model import FakeModel, FakeModelExhausted, FakeResponse, text, thinking, tool_use
from loop.testing.fake_tools import AnyInput, FakeTool, FakeToolCall

__all__ = [
    "AnyInput",
    "FakeModel",
    "FakeModelExhausted",
    "FakeResponse",
    "FakeTool",
    "FakeToolCall",
    "VirtualClock",
    "VirtualTimeout",
    "text",
    "thinking",
    "tool_use",
]
