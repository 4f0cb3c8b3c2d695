"""Which app factory emulates which upstream: ``anthropic`` (first party), ``bedrock``, ``vertex``,
``foundry``. Each module is imported only when its provider is asked for."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Final, cast

from aiohttp import web

from .config import EmulatorConfig

AppFactory = Callable[[EmulatorConfig | None], web.Application]

APP_FACTORIES: Final[dict[str, str]] = {
    "anthropic": "emulators.first_party",
    "bedrock": "emulators.bedrock",
    "vertex": "emulators.vertex",
    "foundry": "emulators.foundry",
}


def app_factory(provider: str) -> AppFactory:
    """The ``create_app`` of ``provider``'s emulator (every module exposes that name)."""
    try:
        module_name = APP_FACTORIES[provider]
    except KeyError:
        known = ", ".join(APP_FACTORIES)
        raise ValueError(f"no emulator for provider {provider!r} (known: {known})") from None
    module = importlib.import_module(module_name)
    return cast(AppFactory, module.create_app)
