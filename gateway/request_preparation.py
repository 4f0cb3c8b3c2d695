"""The one preparation step of an API request, run once before the retry loop.

The cache step first (:class:`~gateway.cache.pipeline.CachePipeline`: session latches, normalised
``cache_control``, prefix hashes; ``count_tokens`` only normalises), then the provider's
preparation (:meth:`~gateway.providers.base.Provider.prepare`: model map, beta policy, request-tag
strip, the upstream's path, headers and body bytes). The result is immutable: every attempt of the
retry loop sends it, a model fallback prepares once for its model, and the relay's non-streaming
fallback derives its variant from it (``as_non_streaming``).
"""

from __future__ import annotations

from gateway.cache.pipeline import CacheContext, CachePipeline
from gateway.providers.base import ClientRequest, Operation, PreparedRequest, Provider
from gateway.values import value


@value
class Prepared:
    """A request ready for the retry loop, and what the cache step learnt (for ``after``)."""

    request: PreparedRequest
    cache: CacheContext | None  # ``None`` for count_tokens (no session bookkeeping)


class RequestPreparation:
    def __init__(self, cache: CachePipeline, provider: Provider) -> None:
        self._cache = cache
        self._provider = provider

    async def prepare(self, client: ClientRequest, team: str) -> Prepared:
        """``ClientInputError`` when the request cannot be served (an unknown model: 404). The cache
        step's context is then dropped: ``after`` records nothing for a request that failed.
        ``team``: the caller's, whose sessions the request may continue."""
        context: CacheContext | None = None
        if client.operation is Operation.MESSAGES:
            client, context = await self._cache.before(client, team)
        else:
            client = self._cache.normalise_only(client)
        return Prepared(self._provider.prepare(client), context)
