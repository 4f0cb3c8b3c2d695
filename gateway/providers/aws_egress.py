"""botocore with the gateway's egress settings, so credential calls leave like inference calls do.

Every botocore call (STS, SSO, container credentials) must take the CA bundle and proxy from the
settings (``gateway.transport.proxy_for``), never from the process environment; one attempt per
call, the gateway's retry loop decides. EC2 instance metadata keeps botocore's direct connection.

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from botocore.config import Config
from botocore.exceptions import UnknownCredentialError
from botocore.httpsession import ProxyConfiguration, URLLib3Session
from botocore.session import Session
from botocore.utils import ContainerMetadataFetcher

from gateway.egress import causes, classify_sync, host_port, scrub
from gateway.providers.credentials_health import CredentialFailure
from gateway.settings.upstream_egress import EgressSettings
from gateway.transport import proxy_for


def _proxies(url: str, egress: EgressSettings) -> dict[str, str]:
    proxy = proxy_for(url, egress)
    return {urlsplit(url).scheme: proxy} if proxy else {}


class EgressSession(Session):  # type: ignore[misc]  # botocore is untyped
    """A botocore session whose clients follow the gateway's egress settings."""

    def __init__(self, egress: EgressSettings) -> None:
        super().__init__()
        self._egress = egress
        self.http_sessions: list[URLLib3Session] = []  # made here, closed by close_http()
        if egress.ca_bundle is not None:
            self.set_config_variable("ca_bundle", str(egress.ca_bundle))

    def create_client(self, service_name: str, *args: Any, **kwargs: Any) -> Any:
        """The client botocore would create, with the proxy chosen for its endpoint.

        The endpoint is only known once botocore has resolved it (region, ``AWS_ENDPOINT_URL_*``,
        FIPS...), so a proxied client is created twice; creating one makes no network call.
        """
        asked: Config | None = kwargs.pop("config", None)

        def config(proxies: dict[str, str]) -> Config:
            # an explicit proxy mapping: botocore never reads the environment; one attempt: the
            # gateway's retry loop decides about retries (botocore's would add up to 5 per try);
            # connect and read bounded (botocore's 60 s each would hold requests waiting for STS)
            bound = self._egress.credential_timeout_s
            base = Config(
                proxies=proxies,
                retries={"total_max_attempts": 1},
                connect_timeout=bound,
                read_timeout=bound,
            )
            return base.merge(asked) if asked is not None else base

        client = super().create_client(service_name, *args, config=config({}), **kwargs)
        if asked is not None and asked.proxies is not None:
            return client  # the caller chose its own proxies
        proxies = _proxies(str(client.meta.endpoint_url), self._egress)
        if proxies:
            client = super().create_client(service_name, *args, config=config(proxies), **kwargs)
        return client

    def close_http(self) -> None:
        """Close the pooled connections of the HTTP sessions this module made."""
        for http in self.http_sessions:
            http.close()


class _SettingsProxies(ProxyConfiguration):  # type: ignore[misc]
    """botocore's proxy lookup answered by the gateway's rule, per request URL."""

    def __init__(self, egress: EgressSettings) -> None:
        super().__init__()
        self._egress = egress

    def proxy_url_for(self, url: str) -> str | None:
        return proxy_for(url, self._egress)


def egress_http_session(egress: EgressSettings, *, timeout: float) -> URLLib3Session:
    """A botocore HTTP session with the gateway's trust store and proxy rule."""
    verify: bool | str = str(egress.ca_bundle) if egress.ca_bundle is not None else True
    session = URLLib3Session(verify=verify, timeout=timeout)
    session._proxy_config = _SettingsProxies(egress)  # botocore takes only a per-scheme mapping
    return session


def egress_session(
    egress: EgressSettings,
    region: str,
    profile: str | None,
    *,
    config_file: str | None = None,
    credentials_file: str | None = None,
) -> EgressSession:
    """A botocore session (and credential chain) that honours the gateway's egress settings;
    ``config_file``/``credentials_file``: the shared files from the settings (one pair per upstream)."""
    session = EgressSession(egress)
    session.set_config_variable("region", region)
    if config_file:
        session.set_config_variable("config_file", config_file)
    if credentials_file:
        session.set_config_variable("credentials_file", credentials_file)
    if profile:
        session.set_config_variable("profile", profile)
    resolver = session.get_component("credential_provider")  # built now, with the profile set
    try:
        container = resolver.get_provider("container-role")
    except UnknownCredentialError:
        container = None
    if container is not None and hasattr(container, "_fetcher"):
        # the same provider instance serves role profiles with credential_source = EcsContainer
        http = egress_http_session(egress, timeout=ContainerMetadataFetcher.TIMEOUT_SECONDS)
        session.http_sessions.append(http)
        container._fetcher = ContainerMetadataFetcher(session=http)
    return session


# -- failures by cause -------------------------------------------------------------------------------
_SOURCE_TARGETS = {
    "assume-role-with-web-identity": "AWS STS (AssumeRoleWithWebIdentity)",
    "assume-role": "AWS STS (AssumeRole)",
    "container-role": "the container credentials endpoint",
    "sso": "AWS IAM Identity Center (SSO)",
}
_THROTTLED = frozenset({"Throttling", "ThrottlingException", "RequestLimitExceeded", "ServiceUnavailable"})


def _endpoint_of(exc: BaseException) -> str | None:
    for item in causes(exc):
        kwargs = getattr(item, "kwargs", None)
        if isinstance(kwargs, dict) and isinstance(kwargs.get("endpoint_url"), str):
            return str(kwargs["endpoint_url"])
    return None


def describe_aws_failure(exc: BaseException, egress: EgressSettings, source: str) -> CredentialFailure:
    """What made botocore's credential fetch (``source``: the provider's method name) fail."""
    what = _SOURCE_TARGETS.get(source, f"the AWS credential provider ({source})")
    prefix = f"the gateway could not get AWS credentials from {what}"
    endpoint = _endpoint_of(exc)
    proxy = proxy_for(endpoint, egress) if endpoint else egress.https_proxy or egress.http_proxy
    target = f"{what} at {host_port(endpoint)}" if endpoint else what
    failure = classify_sync(exc, target=target, proxy=proxy, ca_bundle=egress.ca_bundle)
    if failure is not None:
        return CredentialFailure.from_egress(prefix, failure)
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and isinstance(response.get("Error"), dict):
        code = str(response["Error"].get("Code") or "error")
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in _THROTTLED or (isinstance(status, int) and status >= 500):
            return CredentialFailure(f"{prefix}: it answered {code}; retry later", status=503, retryable=True)
        return CredentialFailure(f"{prefix}: it refused the request: {code}")
    if type(exc).__name__ == "CredentialRetrievalError":
        return CredentialFailure(f"{prefix}: {scrub(str(exc))[:300]}")
    return CredentialFailure(f"{prefix}: {type(exc).__name__}")
