"""Upstream providers behind one interface; ``build_provider`` picks the configured one."""

from gateway.providers.base import ClientRequest, Operation, PreparedRequest, Provider, UpstreamResponse
from gateway.providers.factory import build_provider

__all__ = ["ClientRequest", "Operation", "PreparedRequest", "Provider", "UpstreamResponse", "build_provider"]
