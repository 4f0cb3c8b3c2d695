"""Cache-aware system prompt assembly: sections, a dynamic boundary, cache tiers, the 2^N guard.

Used by the loop's system prompt and context session. Keep runtime checks after
:data:`SYSTEM_PROMPT_DYNAMIC_BOUNDARY`: each one before it doubles the global prefix variants
(:func:`static_prefix_variants` counts them). A full example is in the design document.

Public: ``__all__``; the modules inside are internal.

Details: docs/internals/loop-prompt.md
"""

from gateway.cache.breakpoints import (
    MAX_CACHE_BREAKPOINTS,
    Breakpoint,
    TrimResult,
    count_breakpoints,
    locate_breakpoints,
    trim_breakpoints,
)
from loop.prompt.assembly import AssembledSystem, assemble_system, join_sections, prefix_digest
from loop.prompt.assembly_context import MCP_TOOL_PREFIX, AssemblyContext, tools_include_mcp
from loop.prompt.cache_policy import (
    EXTENDED_CACHE_TTL_BETA,
    PROMPT_CACHING_SCOPE_BETA,
    dynamic_cache_control,
    static_cache_control,
)
from loop.prompt.inputs import PromptInputs
from loop.prompt.section_cache import SectionCache
from loop.prompt.sections import (
    SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
    DANGEROUS_uncached_system_prompt_section,
    DynamicBoundary,
    PromptLayout,
    PromptLayoutError,
    PromptPart,
    SystemPromptSection,
    UncachedBeforeBoundaryError,
    split_at_boundary,
    system_prompt_section,
)
from loop.prompt.variants import VariantReport, static_prefix_variants

__all__ = [
    "EXTENDED_CACHE_TTL_BETA",
    "MAX_CACHE_BREAKPOINTS",
    "MCP_TOOL_PREFIX",
    "PROMPT_CACHING_SCOPE_BETA",
    "SYSTEM_PROMPT_DYNAMIC_BOUNDARY",
    "AssembledSystem",
    "AssemblyContext",
    "Breakpoint",
    "DANGEROUS_uncached_system_prompt_section",
    "DynamicBoundary",
    "PromptInputs",
    "PromptLayout",
    "PromptLayoutError",
    "PromptPart",
    "SectionCache",
    "SystemPromptSection",
    "TrimResult",
    "UncachedBeforeBoundaryError",
    "VariantReport",
    "assemble_system",
    "count_breakpoints",
    "dynamic_cache_control",
    "join_sections",
    "locate_breakpoints",
    "prefix_digest",
    "split_at_boundary",
    "static_cache_control",
    "static_prefix_variants",
    "system_prompt_section",
    "tools_include_mcp",
    "trim_breakpoints",
]
