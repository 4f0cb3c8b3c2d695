"""Reading Bedrock's model catalogue from its control plane, through botocore's ``bedrock`` client.

Read-only (ListInferenceProfiles, ListFoundationModels) at ``GATEWAY_BEDROCK_CONTROL_URL`` with the
provider's credentials and the gateway's egress; each read runs in the default executor with a
single attempt. Model access grants are not verified by these lists.

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from botocore.config import Config
from botocore.credentials import CredentialResolver
from botocore.exceptions import BotoCoreError, ClientError
from botocore.session import Session
from botocore.tokens import FrozenAuthToken

from gateway.config import Settings
from gateway.errors import GatewayError
from gateway.providers.bedrock_auth import BedrockAuth, SigV4ChainAuth
from gateway.providers.model_discovery import DiscoveryError, Fetch
from gateway.transport import proxy_for

SERVICE: Final = "bedrock"
MAX_PAGES: Final = 50
PAGE_SIZE: Final = 1000  # ListInferenceProfiles maxResults upper bound (service model: 1-1000)


def control_url(settings: Settings) -> str:
    """Where the Bedrock control plane is: the override, else the region's public endpoint."""
    if settings.bedrock.control_url:
        return settings.bedrock.control_url.rstrip("/")
    return f"https://bedrock.{settings.bedrock.region}.amazonaws.com"


@dataclass(frozen=True, slots=True)
class _Signing:
    """What botocore signs with: frozen SigV4 keys or a Bedrock API key."""

    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    bearer_token: str | None = None


class _StaticTokenProvider:
    """botocore's ``token_provider`` component, answering with one fixed token."""

    def __init__(self, token: str) -> None:
        self._token = FrozenAuthToken(token)

    def load_token(self, **kwargs: Any) -> FrozenAuthToken:
        return self._token


def inference_profile_ids(summaries: Iterable[Mapping[str, Any]]) -> set[str]:
    """Ids of active inference profiles that route to Anthropic models."""
    return {
        str(summary["inferenceProfileId"])
        for summary in summaries
        if summary.get("status") == "ACTIVE" and "anthropic." in str(summary.get("inferenceProfileId", ""))
    }


def on_demand_model_ids(summaries: Iterable[Mapping[str, Any]]) -> set[str]:
    """Base ids of Anthropic foundation models that can be invoked on demand."""
    return {
        str(summary["modelId"])
        for summary in summaries
        if str(summary.get("modelId", "")).startswith("anthropic.")
        and "ON_DEMAND" in (summary.get("inferenceTypesSupported") or [])
    }


class _Sessions:
    """One botocore session per fetcher (loading the service model costs ~0.2 s; a client from a
    warm session ~10 ms), created on first use in the executor; clients are made per read because
    the SigV4 keys rotate."""

    def __init__(self, bearer_token: str | None) -> None:
        self._bearer_token = bearer_token
        self._session: Any = None
        self._lock = threading.Lock()

    def client(self, settings: Settings, signing: _Signing, url: str) -> Any:
        with self._lock:
            if self._session is None:
                session = Session()
                session.register_component("credential_provider", CredentialResolver(providers=[]))
                if self._bearer_token is not None:
                    session.register_component("token_provider", _StaticTokenProvider(self._bearer_token))
                self._session = session
            return self._session.create_client(
                SERVICE,
                region_name=settings.bedrock.region,
                endpoint_url=url,
                verify=str(settings.egress.ca_bundle) if settings.egress.ca_bundle is not None else True,
                config=_config(settings, url, bearer=self._bearer_token is not None),
                aws_access_key_id=signing.access_key,
                aws_secret_access_key=signing.secret_key,
                aws_session_token=signing.session_token,
            )


def _config(settings: Settings, url: str, *, bearer: bool) -> Config:
    proxy = proxy_for(url, settings.egress)
    cert: str | tuple[str, str] | None = None
    if settings.egress.client_cert is not None:
        cert = (
            (str(settings.egress.client_cert), str(settings.egress.client_key))
            if settings.egress.client_key is not None
            else str(settings.egress.client_cert)
        )
    # half the read's bound per call, so a hung endpoint is reported as botocore's timeout
    timeout = settings.models.model_discovery_timeout_s / 2
    return Config(
        connect_timeout=min(timeout, settings.egress.upstream_connect_timeout_s),
        read_timeout=timeout,
        retries={"total_max_attempts": 1},
        proxies={url.split(":", 1)[0]: proxy} if proxy else {},
        client_cert=cert,
        user_agent_extra="switchyard-model-discovery",
        signature_version="bearer" if bearer else "v4",
    )


def list_anthropic_models(
    settings: Settings, signing: _Signing, url: str, sessions: _Sessions
) -> frozenset[str]:
    """Blocking: the Anthropic profile ids and on-demand base ids the control plane lists."""
    try:
        client = sessions.client(settings, signing, url)
    except BotoCoreError as exc:
        raise DiscoveryError(type(exc).__name__) from None
    try:
        ids: set[str] = set()
        token: str | None = None
        for _ in range(MAX_PAGES):
            kwargs: dict[str, Any] = {"maxResults": PAGE_SIZE}
            if token:
                kwargs["nextToken"] = token
            page = client.list_inference_profiles(**kwargs)
            ids |= inference_profile_ids(page.get("inferenceProfileSummaries", []))
            token = page.get("nextToken")
            if not token:
                break
        models = client.list_foundation_models(byProvider="Anthropic")
        ids |= on_demand_model_ids(models.get("modelSummaries", []))
        return frozenset(ids)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        raise DiscoveryError(f"{exc.operation_name}: HTTP {status} {error.get('Code', '')}".strip()) from None
    except BotoCoreError as exc:
        raise DiscoveryError(type(exc).__name__) from None
    finally:
        client.close()


async def _signing(settings: Settings, auth: BedrockAuth) -> _Signing:
    token = settings.bedrock.api_key
    if token is not None:
        return _Signing(bearer_token=token.get_secret_value())
    if not isinstance(auth, SigV4ChainAuth):
        raise DiscoveryError(f"no credentials for the control plane ({auth.source})")
    try:
        frozen = await auth.current()
    except GatewayError as exc:
        raise DiscoveryError(f"AWS credentials unavailable: {exc.message}") from None
    return _Signing(frozen.access_key, frozen.secret_key, frozen.token)


def bedrock_fetcher(settings: Settings, auth: BedrockAuth) -> Fetch:
    """A :data:`~gateway.providers.model_discovery.Fetch` reading Bedrock's control plane."""
    url = control_url(settings)
    token = settings.bedrock.api_key
    sessions = _Sessions(token.get_secret_value() if token is not None else None)

    async def fetch() -> frozenset[str]:
        signing = await _signing(settings, auth)
        call = functools.partial(list_anthropic_models, settings, signing, url, sessions)
        return await asyncio.get_running_loop().run_in_executor(None, call)

    return fetch
