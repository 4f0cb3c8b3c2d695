"""What a run resolves once, before its first turn: the model caller (the injected one, or the
environment's provider), the system prompt (an ``AgentPrompt`` assembled for the caller's
upstream), and whether microcompact is left to the upstream (server-side context edits)."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence

from loop.config import LoopConfig
from loop.context.microcompact import SERVER_EDIT_PROVIDERS
from loop.context.session import ContextSession
from loop.deps import LoopDeps, ModelCaller
from loop.messages import JSONObject
from loop.request import SystemPrompt
from loop.system_prompt import AgentPrompt

KNOWN_PROVIDERS = frozenset({"anthropic", "bedrock", "vertex", "foundry"})


async def system_prompt(
    system: SystemPrompt | AgentPrompt,
    session: ContextSession,
    caller: ModelCaller,
    tools: Sequence[JSONObject],
) -> tuple[SystemPrompt, tuple[str, ...]]:
    """The run's system prompt and the betas its cache markers need. An ``AgentPrompt`` is
    assembled with the session's section memo, for the caller's upstream (the first-party API
    when the caller does not say: an Anthropic-compatible URL); the global cache scope only when
    the caller's upstream is the first-party API itself."""
    if not isinstance(system, AgentPrompt):
        return system, ()
    provider = getattr(getattr(caller, "provider", None), "name", None)
    assembled = await system.assemble(
        session.sections,
        provider if provider in KNOWN_PROVIDERS else "anthropic",
        tools=tools,
        global_scope=provider == "anthropic",
    )
    return assembled.blocks, assembled.betas


def server_edits_enabled(config: LoopConfig, caller: ModelCaller) -> bool:
    """Whether microcompact is the upstream's: configured, or (``None``) when the caller's upstream
    accepts the context-management beta (see :mod:`loop.context.microcompact`) and the model is
    one context editing supports (Claude 4 and later: not the ``claude-3`` families)."""
    if not config.context.enabled:
        return False
    if config.context.server_context_edits is not None:
        return config.context.server_context_edits
    provider = getattr(caller, "provider", None)
    return getattr(provider, "name", None) in SERVER_EDIT_PROVIDERS and "claude-3" not in config.model


def resolve_caller(deps: LoopDeps) -> tuple[ModelCaller, Callable[[], Awaitable[None]] | None]:
    """The injected caller, or the environment's provider (then owned, so closed, by the run)."""
    if deps.call_model is not None:
        return deps.call_model, None
    from loop.callers.provider import ProviderModelCaller

    caller = ProviderModelCaller.from_environ(os.environ)
    return caller, caller.aclose
