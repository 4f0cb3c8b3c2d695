"""Tools: the declaration (``Tool``), the dispatcher (the security boundary), permissions and the
streaming executor.

Public: ``__all__``; the modules inside are internal (``loop.tools.builtin`` is public too).
"""

from loop.tools.base import Tool, ToolContext, ToolError, ToolInput
from loop.tools.content import Image, ToolResultContent
from loop.tools.dispatcher import ToolDispatcher
from loop.tools.executor import StreamingToolExecutor
from loop.tools.function import FunctionTool, tool
from loop.tools.permissions import (
    PermissionCallback,
    PermissionMode,
    PermissionPolicy,
    PermissionRequest,
    PermissionRule,
    PermissionVerdict,
)
from loop.tools.registry import ToolRegistry

__all__ = [
    "FunctionTool",
    "Image",
    "PermissionCallback",
    "PermissionMode",
    "PermissionPolicy",
    "PermissionRequest",
    "PermissionRule",
    "PermissionVerdict",
    "StreamingToolExecutor",
    "Tool",
    "ToolContext",
    "ToolDispatcher",
    "ToolError",
    "ToolInput",
    "ToolRegistry",
    "ToolResultContent",
    "tool",
]
