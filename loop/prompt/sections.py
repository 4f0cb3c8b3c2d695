"""System prompt sections, the dynamic boundary, and the rules for laying them out.

:func:`system_prompt_section` is memoised per session; :func:`DANGEROUS_uncached_system_prompt_section`
busts the cache on change and needs a ``reason``. ``None`` or blank text leaves a section out.

Details: docs/internals/loop-prompt.md
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import ClassVar, Final, TypeAlias, cast, final

from loop.prompt.inputs import PromptInputs

SectionResult: TypeAlias = str | Awaitable[str | None] | None
SectionCompute: TypeAlias = Callable[[], SectionResult] | Callable[[PromptInputs], SectionResult]


class PromptPart:
    """What a system prompt list holds: sections and the boundary (a common base, so a list
    literal mixing them type-checks as ``list[PromptPart]``)."""

    __slots__ = ()


@final
class DynamicBoundary(PromptPart):
    """The type of :data:`SYSTEM_PROMPT_DYNAMIC_BOUNDARY`; it has exactly one instance."""

    __slots__ = ()
    _instance: ClassVar[DynamicBoundary | None] = None

    def __new__(cls) -> DynamicBoundary:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "SYSTEM_PROMPT_DYNAMIC_BOUNDARY"

    def __reduce__(self) -> str:
        return "SYSTEM_PROMPT_DYNAMIC_BOUNDARY"  # pickles and copies as the same singleton


SYSTEM_PROMPT_DYNAMIC_BOUNDARY: Final = DynamicBoundary()
"""Everything before it is static and globally cached; everything after it is per session."""


class PromptLayoutError(ValueError):
    """The sections cannot be assembled as laid out (a second boundary, a duplicate name...)."""


class UncachedBeforeBoundaryError(PromptLayoutError):
    """An uncached section sits before the boundary: the global prefix would change every request."""


@dataclass(frozen=True, slots=True)
class SystemPromptSection(PromptPart):
    """One named part of the system prompt. Build it with the two functions below."""

    name: str
    compute: SectionCompute = field(repr=False, compare=False)
    cached: bool
    reason: str | None = field(default=None, repr=False, compare=False)
    """Why an uncached section is worth its cost; documentation only."""
    takes_inputs: bool = field(default=False, repr=False, compare=False)

    async def evaluate(self, inputs: PromptInputs) -> str | None:
        """Run ``compute`` once (no memoisation here) and check what it returned."""
        if self.takes_inputs:
            result = cast(Callable[[PromptInputs], SectionResult], self.compute)(inputs)
        else:
            result = cast(Callable[[], SectionResult], self.compute)()
        if inspect.isawaitable(result):
            result = await result
        if result is not None and not isinstance(result, str):
            raise TypeError(
                f"system prompt section {self.name!r} returned {type(result).__name__}, expected str or None"
            )
        return result


def _check_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"section name must be a str, not {type(name).__name__}")
    if not name.strip():
        raise ValueError("section name must be a non-empty string")
    return name


def _takes_inputs(name: str, compute: object) -> bool:
    """Whether ``compute`` wants the inputs: decided once, when the section is defined."""
    if not callable(compute):
        raise TypeError(f"compute of section {name!r} must be callable, not {type(compute).__name__}")
    try:
        signature = inspect.signature(compute)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"compute of section {name!r} has no inspectable signature") from exc
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [
        p
        for p in signature.parameters.values()
        if p.default is inspect.Parameter.empty
        and (p.kind in positional or p.kind is inspect.Parameter.KEYWORD_ONLY)
    ]
    if len(required) > 1 or any(p.kind is inspect.Parameter.KEYWORD_ONLY for p in required):
        raise TypeError(
            f"compute of section {name!r} must take no argument or one positional argument "
            f"(the PromptInputs), not {signature}"
        )
    return len(required) == 1


def system_prompt_section(name: str, compute: SectionCompute) -> SystemPromptSection:
    """A section computed once per session and memoised for the rest of it."""
    name = _check_name(name)
    return SystemPromptSection(name, compute, cached=True, takes_inputs=_takes_inputs(name, compute))


def DANGEROUS_uncached_system_prompt_section(
    name: str, compute: SectionCompute, reason: str
) -> SystemPromptSection:
    """A section recomputed on every request. ``reason`` must say why busting the cache pays off."""
    name = _check_name(name)
    if not isinstance(reason, str):
        raise TypeError(f"reason of uncached section {name!r} must be a str, not {type(reason).__name__}")
    if not reason.strip():
        raise ValueError(
            f"uncached section {name!r} needs a non-empty reason: why is busting the cache worth it?"
        )
    return SystemPromptSection(
        name, compute, cached=False, reason=reason, takes_inputs=_takes_inputs(name, compute)
    )


@dataclass(frozen=True, slots=True)
class PromptLayout:
    """Sections split at the boundary. Without a boundary every section is dynamic: nothing claims
    the global scope unless it is explicitly placed before a boundary."""

    static: tuple[SystemPromptSection, ...]
    dynamic: tuple[SystemPromptSection, ...]


def split_at_boundary(parts: Iterable[PromptPart]) -> PromptLayout:
    """Validate ``parts`` and split them into the static and the dynamic sections.

    Raises :class:`PromptLayoutError` for a second boundary or a duplicate name (the session memo
    is keyed by name), and :class:`UncachedBeforeBoundaryError` for an uncached static section.
    """
    before: list[SystemPromptSection] = []
    after: list[SystemPromptSection] = []
    current = before
    seen: set[str] = set()
    for part in parts:
        if isinstance(part, DynamicBoundary):
            if current is after:
                raise PromptLayoutError("the system prompt has more than one dynamic boundary")
            current = after
            continue
        if not isinstance(part, SystemPromptSection):
            raise TypeError(
                "system prompt parts must be sections or SYSTEM_PROMPT_DYNAMIC_BOUNDARY, "
                f"not {type(part).__name__}"
            )
        if part.name in seen:
            raise PromptLayoutError(f"two system prompt sections are named {part.name!r}")
        seen.add(part.name)
        current.append(part)
    if current is before:
        return PromptLayout((), tuple(before))
    for section in before:
        if not section.cached:
            raise UncachedBeforeBoundaryError(
                f"uncached section {section.name!r} is before the dynamic boundary: it would change "
                "the globally cached prefix on every request; move it after the boundary"
            )
    return PromptLayout(tuple(before), tuple(after))
