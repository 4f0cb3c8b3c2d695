"""The per-app state every emulator app carries: configuration, prompt cache and request log."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from .cache_model import PromptCache
from .config import EmulatorConfig
from .recorder import RequestLog


@dataclass(slots=True)
class StandingFault:
    """Fault directives applied to every request that carries no ``x-emulator-fault`` header of its
    own (a test's outage of this whole upstream: ``RunningEmulator.set_fault``); empty: none."""

    spec: str = ""
    key: str = "standing"


@dataclass(slots=True)
class EmulatorState:
    """The shared, per-app state: configuration, prompt cache, request log and standing fault.

    ``config`` is replaced only by ``RunningEmulator.accept_keys`` (a test rotating the keys the
    upstream accepts, as a provider's console does); every request reads it anew."""

    config: EmulatorConfig
    cache: PromptCache
    log: RequestLog
    standing_fault: StandingFault = field(default_factory=StandingFault)


STATE_KEY: web.AppKey[EmulatorState] = web.AppKey("emulator_state", EmulatorState)


def get_state(app: web.Application) -> EmulatorState:
    """The :class:`EmulatorState` of an emulator app (any provider)."""
    return app[STATE_KEY]


def new_state(config: EmulatorConfig) -> EmulatorState:
    """A fresh state for an app of ``config``: an empty prompt cache and request log."""
    return EmulatorState(
        config=config,
        cache=PromptCache(config.clock, lookback_blocks=config.cache_lookback_blocks),
        log=RequestLog(config.max_recorded_requests),
    )
