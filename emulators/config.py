"""Emulator configuration: one frozen object, fixed when the app is created."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .betas import DEFAULT_ALLOWED_BETAS
from .cache_model import DEFAULT_LOOKBACK_BLOCKS
from .catalog import DEFAULT_CATALOG, ModelCatalog
from .clock import Clock, SystemClock
from .versions import FIRST_PARTY_VERSION, accepted

DEFAULT_API_KEY = "sk-emu-test"
DEFAULT_VERTEX_TOKEN = "ya29.emu-test"
DEFAULT_FOUNDRY_KEY = "foundry-emu-key"


def default_api_versions() -> frozenset[str]:
    """``2023-06-01`` and whatever version the installed SDK sends (read at runtime)."""
    return accepted(FIRST_PARTY_VERSION)


@dataclass(frozen=True)
class EmulatorConfig:
    """Everything that shapes an emulator's behaviour.

    ``clock`` is shared by the prompt cache (TTLs), the rate-limit headers and the per-chunk
    streaming delay; pass a :class:`~emulators.clock.ManualClock` in tests.
    """

    api_keys: frozenset[str] = frozenset({DEFAULT_API_KEY})
    """Keys accepted in ``x-api-key`` or ``Authorization: Bearer``."""
    api_versions: frozenset[str] = field(default_factory=default_api_versions)
    """Accepted ``anthropic-version`` values."""
    check_betas: bool = True
    """Reject ``anthropic-beta`` values outside ``allowed_betas`` (400 ``Unsupported beta header``)."""
    allowed_betas: frozenset[str] = DEFAULT_ALLOWED_BETAS
    clock: Clock = field(default_factory=SystemClock)
    catalog: ModelCatalog = DEFAULT_CATALOG
    chunk_delay_s: float = 0.0
    """Clock time slept before each ``content_block_delta`` of a stream (0: no sleeping)."""
    default_scenario: str = "text"
    """Scenario used when a request names none (see :mod:`.scenarios`)."""
    cache_lookback_blocks: int = DEFAULT_LOOKBACK_BLOCKS
    enforce_ttl_order: bool = True
    """Reject a ``ttl:"1h"`` breakpoint that follows a 5m one, as the real API does."""
    retry_after_s: int = 1
    """``retry-after`` (seconds) sent with 429 responses."""
    retry_after_ms: float | None = None
    """If set, ``retry-after-ms`` sent with every retryable error (408/409/429/5xx/529)."""
    max_recorded_requests: int = 10_000
    """The request log keeps at most this many most recent requests."""
    organization_id: str = "00000000-0000-4000-8000-00000000e4e1"
    max_body_bytes: int = 32 * 1024 * 1024
    """First-party app: larger request bodies get ``413 request_too_large`` (the real cap is 32 MB,
    providers.md section 5; lower it to reach that answer with small bodies)."""

    # Vertex AI emulator (emulators.vertex)
    vertex_projects: frozenset[str] = frozenset()
    """Projects served (empty: any); another project in the path is a 403 PERMISSION_DENIED."""
    vertex_locations: frozenset[str] = frozenset()
    """Locations served (empty: any); another location is a 404 NOT_FOUND."""
    vertex_tokens: frozenset[str] = frozenset({DEFAULT_VERTEX_TOKEN})
    """Static OAuth access tokens accepted in ``Authorization: Bearer`` (never expire)."""
    vertex_service_accounts: Mapping[str, str] = field(default_factory=dict)
    """``client_email`` -> PEM public key: accounts whose JWT-bearer assertions ``POST /token`` honours."""
    vertex_token_lifetime_s: int = 3600
    """``expires_in`` of tokens issued by ``POST /token`` (enforced on ``clock``)."""
    vertex_max_request_bytes: int = 30 * 1024 * 1024
    """Larger predict bodies get Vertex's 400 ``The request size (N bytes) exceeds 30.000MB limit.``"""

    # Microsoft Foundry emulator (emulators.foundry)
    foundry_api_keys: frozenset[str] = frozenset({DEFAULT_FOUNDRY_KEY})
    """Keys accepted in ``x-api-key`` or ``api-key``."""
    foundry_entra_tokens: frozenset[str] = frozenset()
    """Static Entra ID bearer tokens accepted (never expire)."""
    foundry_entra_clients: Mapping[str, str] = field(default_factory=dict)
    """``client_id`` -> client secret: apps the Entra token endpoint issues tokens to."""
    foundry_entra_token_lifetime_s: int = 3600
    foundry_count_tokens: bool = True
    """False: count_tokens answers Azure's ``api_not_supported`` error."""

    def __post_init__(self) -> None:
        if self.chunk_delay_s < 0:
            raise ValueError("chunk_delay_s must be >= 0")
        if self.cache_lookback_blocks < 0:
            raise ValueError("cache_lookback_blocks must be >= 0")
        if self.max_body_bytes < 1:
            raise ValueError("max_body_bytes must be >= 1")
        if self.max_recorded_requests < 1:
            raise ValueError("max_recorded_requests must be >= 1")
        if self.vertex_token_lifetime_s < 1 or self.foundry_entra_token_lifetime_s < 1:
            raise ValueError("token lifetimes must be >= 1 s")
