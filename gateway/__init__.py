"""switchyard gateway: an Anthropic Messages API gateway for the direct API and cloud upstreams.

Public: the names in ``__all__`` below: the settings, the app, the metrics it reports, serving it
in-process (``running``) or as ``switchyard serve`` does (``serve``). Every module and subpackage
of ``gateway`` is internal: their paths and names may change in any release. The names load on
first use, so ``import gateway`` imports nothing else::

    import gateway

    settings = gateway.Settings.from_environ({"GATEWAY_API_KEYS": "sk-gw-1", "ANTHROPIC_API_KEY": key})
    async with gateway.running(gateway.create_app(settings), "127.0.0.1", 8080) as server:
        ...  # server.base_url; or gateway.serve(settings) to run it as `switchyard serve` does
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.app import create_app
    from gateway.config import ConfigError, Settings
    from gateway.errors import GatewayError
    from gateway.metrics import GatewayMetrics
    from gateway.process import RunningServer, running, serve
    from gateway.provider_names import ProviderName

__version__ = "0.1.0"

_HOMES: dict[str, str] = {
    "ConfigError": "gateway.config",
    "GatewayError": "gateway.errors",
    "GatewayMetrics": "gateway.metrics",
    "ProviderName": "gateway.provider_names",
    "RunningServer": "gateway.process",
    "Settings": "gateway.config",
    "create_app": "gateway.app",
    "running": "gateway.process",
    "serve": "gateway.process",
}

__all__ = [
    "ConfigError",
    "GatewayError",
    "GatewayMetrics",
    "ProviderName",
    "RunningServer",
    "Settings",
    "__version__",
    "create_app",
    "running",
    "serve",
]


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'gateway' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
