"""What a tool declares: identity, input schema, safety flags, limits, and how to run it.

A tool is a ``Tool`` subclass (class attributes and ``call``) or a plain function turned into one
by ``loop.tools.function.tool``. ``call`` returns text or content blocks (``loop.tools.content``).
``ToolContext[Deps]`` carries the call's identity, the clock and the run's user dependencies
(``QueryParams.tool_deps``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Generic

from pydantic import BaseModel, ConfigDict
from typing_extensions import TypeVar

from loop.deps import Clock
from loop.messages import JSONObject
from loop.tools.content import ToolResultContent


class ToolInput(BaseModel):
    """Base for tool input models: unknown fields are a validation error, not silently dropped."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolError(Exception):
    """An expected failure (file not found, ambiguous edit...): its message is returned to the
    model as an error result, without the "crashed" wording an unexpected exception gets."""


DepsT = TypeVar("DepsT", default=Any)
NO_DEPS: Any = None
"""The type of the user's dependencies (``ToolContext[MyDeps]``; bare ``ToolContext``: ``Any``)."""


@dataclass(frozen=True, slots=True)
class ToolContext(Generic[DepsT]):
    tool_use_id: str
    turn: int
    clock: Clock
    timeout_s: float | None = None
    """The dispatcher's timeout for this call: a tool that can stop early with partial results
    (a search) plans to finish before it."""
    deps: DepsT = NO_DEPS
    """The run's user dependencies (``QueryParams.tool_deps``): a database handle, an HTTP client,
    settings... whatever the application injects; ``None`` when it injects nothing."""


InputT = TypeVar("InputT", bound=BaseModel)


class Tool(ABC, Generic[InputT]):
    """A tool the model can call. Subclasses set the class attributes and implement ``call``.

    ``input_model``'s JSON schema is what the model sees; the dispatcher validates every call
    against it before anything else runs.
    """

    name: str
    description: str
    input_model: type[InputT]
    read_only: bool = False
    """Changes nothing: allowed in plan mode, runs without asking in the asking modes."""
    destructive: bool = False
    """Can destroy data (overwrite, delete): asks for confirmation even in ``acceptEdits``."""
    max_result_size_chars: int | None = 50_000
    """The largest result kept whole in the history; a longer one is excerpted before the next
    model call and stored whole (the context layers' tool-result budget). ``None``: exempt."""
    timeout_s: float | None = None
    """``None``: the loop's ``tool_timeout_s``."""

    def is_concurrency_safe(self, tool_input: InputT) -> bool:
        """Whether this call may run alongside others (and start while the response streams)."""
        return self.read_only

    def input_paths(self, tool_input: InputT) -> tuple[str, ...]:
        """The paths this call touches, for path-prefix permission rules (workspace-relative)."""
        return ()

    def input_schema(self) -> JSONObject:
        return self.input_model.model_json_schema()

    def definition(self) -> JSONObject:
        """The entry of the request's ``tools`` array."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema()}

    @abstractmethod
    async def call(self, tool_input: InputT, context: ToolContext) -> ToolResultContent:
        """Run the call; return the result: text, or a list of content blocks (``text``,
        ``image``, ``document``, ``search_result``). Raise ``ToolError`` for expected failures."""
