"""The 2^N guard: how many distinct global-prefix variants a prompt produces across configurations.

Relevant conditions are observed (a tracing ``PromptInputs``), not declared; this assumes
``compute`` depends on its inputs only, not on globals or the clock.

Details: docs/internals/loop-prompt.md
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from loop.prompt.assembly import join_sections, prefix_digest
from loop.prompt.inputs import PromptInputs
from loop.prompt.sections import PromptPart, SystemPromptSection, split_at_boundary

DEFAULT_MAX_COMBINATIONS: Final = 65_536


@dataclass(frozen=True, slots=True)
class VariantReport:
    """What the static part of a prompt depends on and how many prefixes it can produce."""

    variants: int
    """Distinct static-prefix texts over the explored combinations."""
    digests: frozenset[str]
    """Their :func:`~loop.prompt.assembly.prefix_digest` values."""
    conditions_read: tuple[str, ...]
    """Every input name read before the boundary (sorted)."""
    unexplored: tuple[str, ...]
    """Names read before the boundary that the condition space does not vary."""
    reads_by_section: Mapping[str, tuple[str, ...]]
    """Static section name -> the input names it read."""
    combinations: int
    """How many combinations were evaluated."""

    @property
    def implied_bound(self) -> int:
        """2^N for the N conditions read before the boundary (as if each were a boolean)."""
        return 1 << len(self.conditions_read)

    @property
    def ok(self) -> bool:
        """A well-formed prompt: one static prefix and no runtime input read before the boundary."""
        return self.variants <= 1 and not self.conditions_read


def _check_space(condition_space: Mapping[str, Sequence[Any]]) -> dict[str, tuple[Any, ...]]:
    space: dict[str, tuple[Any, ...]] = {}
    for name, values in condition_space.items():
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            raise TypeError(f"condition {name!r} needs a sequence of values, not {type(values).__name__}")
        if not values:
            raise ValueError(f"condition {name!r} has no values")
        space[name] = tuple(values)
    return space


async def _static_text(
    sections: Sequence[SystemPromptSection], values: Mapping[str, Any], reads: dict[str, set[str]]
) -> str:
    texts: list[str | None] = []
    for section in sections:
        inputs = PromptInputs(values)
        texts.append(await section.evaluate(inputs))
        reads[section.name] |= inputs.reads
    return join_sections(texts)


async def static_prefix_variants(
    parts: Sequence[PromptPart],
    condition_space: Mapping[str, Sequence[Any]],
    *,
    base_inputs: Mapping[str, Any] | None = None,
    max_combinations: int = DEFAULT_MAX_COMBINATIONS,
) -> VariantReport:
    """Count the static-prefix variants of ``parts`` over ``condition_space``.

    ``condition_space`` maps an input name to the values it can take at runtime (e.g.
    ``{"model": ("opus", "sonnet"), "fast_mode": (False, True)}``). Only static sections run,
    uncached and without a session. Raises the layout errors of
    :func:`~loop.prompt.sections.split_at_boundary`, and ``ValueError`` when the conditions read
    would need more than ``max_combinations`` evaluations.
    """
    static = split_at_boundary(parts).static
    space = _check_space(condition_space)
    defaults = {name: values[0] for name, values in space.items()}
    base = {**(base_inputs or {}), **defaults}
    reads: dict[str, set[str]] = {section.name: set() for section in static}
    varied: list[str] = []
    evaluated: set[tuple[int, ...]] = set()
    digests: set[str] = set()
    while True:
        needed = math.prod(len(space[name]) for name in varied)
        if needed > max_combinations:
            raise ValueError(
                f"{needed} combinations of {varied} exceed max_combinations={max_combinations}; "
                "that many prefix variants is itself the finding"
            )
        for indices in itertools.product(*(range(len(space[name])) for name in varied)):
            if indices in evaluated:
                continue
            evaluated.add(indices)
            values = {**base, **{name: space[name][i] for name, i in zip(varied, indices, strict=True)}}
            digests.add(prefix_digest(await _static_text(static, values, reads)))
        read = set().union(*reads.values())
        new = sorted(name for name in read if name in space and name not in varied)
        if not new:
            break
        varied.extend(new)
        evaluated = {indices + (0,) * len(new) for indices in evaluated}
    read = set().union(*reads.values())
    return VariantReport(
        variants=len(digests),
        digests=frozenset(digests),
        conditions_read=tuple(sorted(read)),
        unexplored=tuple(sorted(read - space.keys())),
        reads_by_section={name: tuple(sorted(names)) for name, names in reads.items()},
        combinations=len(evaluated),
    )
