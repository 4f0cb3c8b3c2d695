"""Upstream providers behind one interface; ``build_provider`` picks the configured one."""

from gateway.providers.base import ClientRequest, Operation, Provider, UpstreamResponse
from gateway.providers.factory import build_provider

__all__ = ["ClientRequest", "Operation", "Provider", "UpstreamResponse", "build_provider"]
