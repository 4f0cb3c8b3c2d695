"""Tools from plain functions: ``@tool``.

The input schema comes from the parameters' type hints and defaults, descriptions from the
docstring; a first ``ToolContext`` parameter is not part of the schema. Sync functions run in a
worker thread. An example is in the design document.

Details: docs/internals/loop-tools.md
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any, get_origin, get_type_hints, overload

import docstring_parser
from pydantic import BaseModel, Field, create_model

from loop.tools.base import Tool, ToolContext, ToolInput
from loop.tools.content import ToolResultContent, to_content

ToolFunction = Callable[..., Any]


def _is_context(annotation: Any) -> bool:
    return annotation is ToolContext or get_origin(annotation) is ToolContext


def _description(doc: docstring_parser.Docstring) -> str:
    parts = [p for p in (doc.short_description, doc.long_description) if p]
    return "\n\n".join(parts).strip()


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_")) or "Tool"


class FunctionTool(Tool[BaseModel]):
    """A ``Tool`` whose input model and description were read from a function."""

    def __init__(
        self,
        func: ToolFunction,
        *,
        name: str | None = None,
        description: str | None = None,
        read_only: bool = False,
        destructive: bool = False,
        timeout_s: float | None = None,
        max_result_size_chars: int | None = 50_000,
        concurrency_safe: bool | None = None,
    ) -> None:
        if read_only and destructive:
            raise ValueError("a tool cannot be both read_only and destructive")
        self.func = func
        self.name = name or func.__name__
        signature = inspect.signature(func)
        hints = get_type_hints(func, include_extras=True)
        doc = docstring_parser.parse(inspect.getdoc(func) or "")
        params = list(signature.parameters.values())
        self._takes_context = bool(params) and _is_context(hints.get(params[0].name))
        if self._takes_context:
            params = params[1:]
        documented = {p.arg_name: p.description for p in doc.params if p.description}
        fields: dict[str, Any] = {}
        for param in params:
            if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                raise TypeError(f"tool {self.name!r}: *args/**kwargs cannot be described to the model")
            if param.kind is inspect.Parameter.POSITIONAL_ONLY:
                raise TypeError(f"tool {self.name!r}: parameter {param.name!r} is positional-only")
            if _is_context(hints.get(param.name)):
                raise TypeError(f"tool {self.name!r}: the ToolContext parameter must come first")
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[param.name] = (
                hints.get(param.name, Any),
                Field(default, description=documented.get(param.name)),
            )
        self._parameters = tuple(fields)
        self.input_model = create_model(f"{_camel(self.name)}Input", __base__=ToolInput, **fields)
        self.description = description or _description(doc) or self.name
        self.read_only = read_only
        self.destructive = destructive
        self.timeout_s = timeout_s
        self.max_result_size_chars = max_result_size_chars
        self._concurrency_safe = read_only if concurrency_safe is None else concurrency_safe
        self._async = inspect.iscoroutinefunction(func)

    def is_concurrency_safe(self, tool_input: BaseModel) -> bool:
        return self._concurrency_safe

    async def call(self, tool_input: BaseModel, context: ToolContext) -> ToolResultContent:
        kwargs = {name: getattr(tool_input, name) for name in self._parameters}
        args = (context,) if self._takes_context else ()
        if self._async:
            result = await self.func(*args, **kwargs)
        else:
            result = await asyncio.to_thread(self.func, *args, **kwargs)
        return to_content(result)


@overload
def tool(func: ToolFunction, /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    destructive: bool = False,
    timeout_s: float | None = None,
    max_result_size_chars: int | None = 50_000,
    concurrency_safe: bool | None = None,
) -> Callable[[ToolFunction], FunctionTool]: ...


def tool(
    func: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    destructive: bool = False,
    timeout_s: float | None = None,
    max_result_size_chars: int | None = 50_000,
    concurrency_safe: bool | None = None,
) -> FunctionTool | Callable[[ToolFunction], FunctionTool]:
    """Make a function a tool: ``@tool`` or ``@tool(read_only=True, name=...)``.

    ``concurrency_safe`` defaults to ``read_only`` (a safe call may start while the response is
    still streaming and run alongside others).
    """

    def wrap(f: ToolFunction) -> FunctionTool:
        return FunctionTool(
            f,
            name=name,
            description=description,
            read_only=read_only,
            destructive=destructive,
            timeout_s=timeout_s,
            max_result_size_chars=max_result_size_chars,
            concurrency_safe=concurrency_safe,
        )

    return wrap(func) if func is not None else wrap
