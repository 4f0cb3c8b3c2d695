"""Upstream providers behind one interface; ``build_provider`` picks the configured one.

Internal: the server's own; ``loop.callers.ProviderModelCaller`` is the public way to call a provider in-process.
"""

from gateway.providers.base import ClientRequest, Operation, PreparedRequest, Provider, UpstreamResponse
from gateway.providers.factory import build_provider

__all__ = ["ClientRequest", "Operation", "PreparedRequest", "Provider", "UpstreamResponse", "build_provider"]
