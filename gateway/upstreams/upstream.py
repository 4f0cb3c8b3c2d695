"""One named upstream of the upstreams file: its provider, and its own cache step and request
preparation (built once at start-up, ``build_upstreams``).

Details: docs/internals/gateway-upstreams.md
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from gateway.cache.pipeline import CachePipeline
from gateway.cache.session_store import SessionStore
from gateway.errors import GatewayError
from gateway.provider_names import ProviderName
from gateway.providers.base import Operation, PreparedRequest, Provider, UpstreamResponse
from gateway.request_preparation import RequestPreparation
from gateway.upstreams.config import UpstreamsConfig

Send = Callable[[PreparedRequest], Awaitable[UpstreamResponse]]


@dataclass(frozen=True, slots=True)
class Upstream:
    """One named upstream: its provider and its own cache step and preparation."""

    name: str
    kind: ProviderName
    provider: Provider
    cache: CachePipeline
    preparation: RequestPreparation

    def send(self, operation: Operation) -> Send:
        return self.provider.messages if operation is Operation.MESSAGES else self.provider.count_tokens


def build_upstreams(
    config: UpstreamsConfig,
    providers: dict[str, Provider],
    store: SessionStore,
    on_break: Callable[[str, str], None],
) -> dict[str, Upstream]:
    """Every upstream of ``config``, with its provider from ``providers`` (by name); their cache
    steps share the session ``store`` and report breaks to ``on_break(provider, reason)``."""
    built: dict[str, Upstream] = {}
    for spec in config.upstreams:
        provider = providers[spec.name]
        kind = spec.provider.value
        cache = CachePipeline(spec.settings.cache, kind, store, on_break=functools.partial(on_break, kind))
        built[spec.name] = Upstream(
            spec.name, spec.provider, provider, cache, RequestPreparation(cache, provider)
        )
    return built


async def list_models(
    upstreams: Iterable[Upstream], available: Callable[[str], bool], headers: list[tuple[str, str]], query: str
) -> UpstreamResponse:
    """``GET /v1/models`` from the first upstream (file order) whose breaker is not open that
    answers it: an unreachable one, or one answering 429 or 5xx, passes it on to the next (the last
    one's answer or error stands). Bedrock and Vertex list from their tables, never failing."""
    listed = list(upstreams)
    candidates = [u for u in listed if available(u.name)] or listed
    for index, upstream in enumerate(candidates):
        last = index == len(candidates) - 1
        try:
            response = await upstream.provider.list_models(headers, query)
        except GatewayError:
            if last:
                raise
            continue
        if last or (response.status < 500 and response.status != 429):
            return response
        response.close()
    raise AssertionError("unreachable: the last candidate returns or raises")  # pragma: no cover
