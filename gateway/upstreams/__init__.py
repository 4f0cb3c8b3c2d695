"""Several upstreams at once (issue 18): ordered failover and per-model routes that keep prompt
caches warm, with health, circuit breakers and session placement (shared through Redis when
``GATEWAY_SESSION_STORE`` is a Redis URL).

Modules: ``config`` (the ``GATEWAY_UPSTREAMS_FILE`` model), ``router`` (candidates in order),
``affinity`` (session placement), ``breaker`` / ``breaker_redis`` (circuit breakers), ``health``
(passive health, active probe), ``signatures`` (thinking blocks on a move between providers),
``metrics``, ``failover`` (the request path), and :func:`build` here, which wires them.

Internal: the server's own (operators configure it with ``GATEWAY_UPSTREAMS_FILE``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from gateway.config import ConfigError, Settings
from gateway.providers.base import Provider
from gateway.upstreams.affinity import PlacementMap, RedisPlacementMap
from gateway.upstreams.breaker import BreakerBoard
from gateway.upstreams.config import FILE_VARIABLE, upstreams_of
from gateway.upstreams.failover import UpstreamSet
from gateway.upstreams.metrics import UpstreamMetrics
from gateway.upstreams.upstream import build_upstreams

if TYPE_CHECKING:
    from gateway.server import Gateway

__all__ = ["UpstreamSet", "build", "build_providers"]


def build_providers(settings: Settings) -> dict[str, Provider]:
    """One provider per upstream of the settings' ``GATEWAY_UPSTREAMS_FILE`` (loaded here if needed)."""
    from gateway.providers.factory import build_provider

    config = upstreams_of(settings)
    assert config is not None, "GATEWAY_UPSTREAMS_FILE is not set"
    providers: dict[str, Provider] = {}
    for index, spec in enumerate(config.upstreams):
        try:
            providers[spec.name] = build_provider(spec.settings)
        except ConfigError as exc:  # say which upstream (a profile missing from its files...)
            where = f"{FILE_VARIABLE}: upstreams[{index}] ({spec.name})"
            raise ConfigError(*(f"{where}: {problem}" for problem in exc.problems)) from None
    return providers


def build(
    gateway: Gateway,
    settings: Settings,
    providers: Mapping[str, Provider],
    *,
    clock: Callable[[], float] = time.time,
) -> UpstreamSet:
    config = upstreams_of(settings)
    assert config is not None, "GATEWAY_UPSTREAMS_FILE is not set"
    names = config.names()
    metrics = UpstreamMetrics(gateway.metrics.registry, names)
    breakers: BreakerBoard
    placements: PlacementMap
    affinity = config.affinity
    teams = lambda: len(gateway.keys.teams)  # noqa: E731 - read at each new placement (keys reload)
    shared = gateway.redis_link  # the session store's Redis client and outage back-off
    if shared is not None:
        from gateway.upstreams.breaker_redis import RedisBreakerBoard

        breakers = RedisBreakerBoard(
            names,
            config.breaker,
            shared,
            sync_s=config.breaker.sync_s,
            clock=clock,
            on_change=metrics.breaker_changed,
        )
        placements = RedisPlacementMap(
            affinity.max_sessions, affinity.idle_s, shared, clock=clock, teams=teams
        )
    else:
        breakers = BreakerBoard(names, config.breaker, clock=clock, on_change=metrics.breaker_changed)
        placements = PlacementMap(affinity.max_sessions, affinity.idle_s, clock=clock, teams=teams)
    metrics.watch_breakers(breakers.state)
    upstreams = build_upstreams(
        config, dict(providers), gateway.cache.store, gateway.metrics.observe_cache_break
    )
    return UpstreamSet(gateway, config, upstreams, breakers, placements, metrics, clock=clock)
