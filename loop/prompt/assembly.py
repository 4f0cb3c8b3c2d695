"""Assemble the Messages API ``system`` blocks from sections: static block, dynamic block.

The static sections (before the boundary) are joined with blank lines into ONE text block with
:func:`~loop.prompt.cache_policy.static_cache_control`; the dynamic ones into one block with
:func:`~loop.prompt.cache_policy.dynamic_cache_control`. A section whose text is ``None`` or
blank is left out; a part with no text produces no block (so 0, 1 or 2 blocks, each carrying one
breakpoint). Texts are used verbatim: the same session always gets the same bytes.

Sections are resolved concurrently (async ``compute`` functions doing I/O overlap on a session's
first request); when several fail, the first failing section in prompt order is raised, after
all of them have finished.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from loop.prompt.assembly_context import AssemblyContext
from loop.prompt.cache_policy import betas_for, dynamic_cache_control, static_cache_control
from loop.prompt.inputs import PromptInputs
from loop.prompt.sections import PromptPart, split_at_boundary

SECTION_SEPARATOR: Final = "\n\n"


def join_sections(texts: Iterable[str | None]) -> str:
    """Non-blank texts joined with a blank line ("" when there are none)."""
    return SECTION_SEPARATOR.join(t for t in texts if t is not None and t.strip())


def prefix_digest(text: str) -> str:
    """SHA-256 (hex) of a static part's text: one value per global-prefix variant."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class AssembledSystem:
    """The ``system`` value for a request, with what it costs and needs."""

    blocks: list[dict[str, Any]]
    """Text blocks for the request's ``system`` field (fresh dicts: the caller may mutate them)."""
    breakpoints: int
    """``cache_control`` markers used by ``blocks`` (count them against the request's 4)."""
    betas: tuple[str, ...]
    """``anthropic-beta`` values the markers need (``ttl: "1h"``, ``scope: "global"``)."""
    static_digest: str | None
    """:func:`prefix_digest` of the static part (``None`` without one): equal across sessions and
    users for a well-formed prompt; a metric over it shows 2^N fragmentation in production."""


async def assemble_system(parts: Sequence[PromptPart], context: AssemblyContext) -> AssembledSystem:
    """Resolve every section for this request and build the ``system`` blocks.

    Raises :class:`~loop.prompt.sections.UncachedBeforeBoundaryError` when an uncached section
    sits before the boundary, and :class:`~loop.prompt.sections.PromptLayoutError` for other
    layout mistakes, before any ``compute`` runs.
    """
    layout = split_at_boundary(parts)
    inputs = PromptInputs(context.inputs)
    sections = (*layout.static, *layout.dynamic)
    results = await asyncio.gather(
        *(context.session.resolve(section, inputs) for section in sections), return_exceptions=True
    )
    texts: list[str | None] = []
    for result in results:
        if isinstance(result, BaseException):
            raise result
        texts.append(result)
    static_text = join_sections(texts[: len(layout.static)])
    dynamic_text = join_sections(texts[len(layout.static) :])

    blocks: list[dict[str, Any]] = []
    if static_text:
        blocks.append({"type": "text", "text": static_text, "cache_control": static_cache_control(context)})
    if dynamic_text:
        blocks.append({"type": "text", "text": dynamic_text, "cache_control": dynamic_cache_control(context)})
    return AssembledSystem(
        blocks=blocks,
        breakpoints=len(blocks),
        betas=betas_for(block["cache_control"] for block in blocks),
        static_digest=prefix_digest(static_text) if static_text else None,
    )
