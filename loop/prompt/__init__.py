"""Cache-aware system prompt assembly: sections, a dynamic boundary, cache tiers, the 2^N guard.

A client-side library: the loop's system prompt (``loop.AgentPrompt``) and context session use
it, and so can any caller that builds system prompts. The breakpoint counting and trimming it
re-exports live in ``gateway.cache.breakpoints``, the one piece the gateway's cache pipeline uses.

The system prompt is a list of named sections split by :data:`SYSTEM_PROMPT_DYNAMIC_BOUNDARY`.
The part before it is identical for every session, user and organisation and is cached with the
broadest scope the upstream accepts (``scope: "global"`` on the first-party API without MCP
tools); the part after it is cached per session. Sections are memoised per session
(:class:`SectionCache`) unless declared with :func:`DANGEROUS_uncached_system_prompt_section`.
Keep runtime checks (which model? which user setting?) after the boundary: each one before it
doubles the global prefix variants; :func:`static_prefix_variants` counts them in tests.

Example (inside a coroutine)::

    async def load_memory(inputs: PromptInputs) -> str | None:
        path = inputs.project_dir / "CLAUDE.md"
        return await asyncio.to_thread(path.read_text) if path.exists() else None

    PROMPT = [
        system_prompt_section("identity", lambda: "You are a careful software engineering agent."),
        system_prompt_section("tool_policy", lambda: TOOL_POLICY),  # a module constant
        SYSTEM_PROMPT_DYNAMIC_BOUNDARY,
        system_prompt_section("environment", lambda i: f"Model: {i.model}\\nWorking directory: {i.cwd}"),
        system_prompt_section("memory", load_memory),  # read once per session
        DANGEROUS_uncached_system_prompt_section(
            "mcp_instructions",
            lambda i: i.mcp_instructions,
            reason="MCP servers connect mid-session; stale instructions would name missing tools",
        ),
    ]

    session = SectionCache()  # one per conversation, kept for its whole life
    context = AssemblyContext(
        session=session,
        provider=settings.provider,  # ProviderName or "anthropic" / "bedrock" / ...
        ttl_1h=latches.ttl_1h,  # latched once per session by the caller
        has_mcp_tools=tools_include_mcp(tools),
        inputs={"model": model, "cwd": cwd, "project_dir": root, "mcp_instructions": text},
    )
    system = await assemble_system(PROMPT, context)
    body = {"model": model, "system": system.blocks, "tools": tools, "messages": messages}
    body = trim_breakpoints(body).body  # never more than 4 cache_control markers
    betas.extend(system.betas)  # extended-cache-ttl / prompt-caching-scope when used

Public: ``__all__``; the modules inside are internal.
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
