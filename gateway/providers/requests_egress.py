"""A ``requests`` session with the gateway's egress settings, for google-auth and azure-identity.

It never reads the environment (``trust_env`` off); TLS and proxies come from the settings.
Imported only by the Vertex and Foundry credential code, never by a first-party gateway.

Details: docs/internals/gateway-providers.md
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import requests

from gateway.settings.upstream_egress import EgressSettings
from gateway.transport import proxy_for


class EgressRequestsSession(requests.Session):
    """``requests.Session`` whose proxies and trust store come from the gateway's settings."""

    def __init__(self, egress: EgressSettings) -> None:
        super().__init__()
        self.trust_env = False
        self._egress = egress
        self._ca_bundle = str(egress.ca_bundle) if egress.ca_bundle is not None else None
        if self._ca_bundle is not None:
            self.verify = self._ca_bundle

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        # the libraries' own defaults (google-auth 120 s, azure-core 300 s) would hold every request
        # that waits for a token behind one hung token endpoint for minutes
        kwargs["timeout"] = capped_timeout(kwargs.get("timeout"), self._egress.credential_timeout_s)
        target = url.decode() if isinstance(url, bytes) else url
        if not kwargs.get("proxies"):
            proxy = proxy_for(target, self._egress)
            kwargs["proxies"] = {urlsplit(target).scheme: proxy} if proxy else {}
        if self._ca_bundle is not None and kwargs.get("verify") in (None, True):
            kwargs["verify"] = self._ca_bundle
        verb = method.decode() if isinstance(method, bytes) else method
        return super().request(verb, target, *args, **kwargs)


def capped_timeout(given: Any, bound: float) -> float | tuple[float, float]:
    """A ``requests`` timeout (seconds, a ``(connect, read)`` pair, or ``None``: none) within ``bound``."""
    if isinstance(given, tuple) and len(given) == 2:
        connect, read = given
        return (
            bound if connect is None else min(float(connect), bound),
            bound if read is None else min(float(read), bound),
        )
    if isinstance(given, int | float) and not isinstance(given, bool):
        return min(float(given), bound)
    return bound


def azure_transport_options(egress: EgressSettings) -> dict[str, Any]:
    """Keyword arguments for an azure-identity credential so its token calls use the session above."""
    from azure.core.pipeline.transport import RequestsTransport

    transport = RequestsTransport(
        session=EgressRequestsSession(egress), session_owner=False, use_env_settings=False
    )
    options: dict[str, Any] = {"transport": transport}
    if egress.ca_bundle is not None:
        options["connection_verify"] = str(egress.ca_bundle)
    return options
