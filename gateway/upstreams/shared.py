"""The Redis keys of the upstream state the replicas share (breakers in ``breaker_redis``, session
placements in ``affinity``), through the session store's Redis link (:mod:`gateway.redis_link`:
one client and one outage back-off per replica; a Redis error never fails a request).
"""

from __future__ import annotations

from typing import Final

KEY_PREFIX: Final = "switchyard:upstreams:"
