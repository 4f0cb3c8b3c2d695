"""The start-up summary: what ``switchyard serve`` logs about its configuration, before it listens.

It shows the selected provider's own endpoint and where its credential comes from (never the
credential), and none of the other providers' settings: a Bedrock gateway shows its region,
runtime URL and AWS credential source, not ``ANTHROPIC_BASE_URL``. With ``GATEWAY_UPSTREAMS_FILE``
it shows each named upstream that way instead (the environment's single provider serves nothing
then). URLs lose their userinfo, and their query's values are masked. The fleet shows as sign-in (issuer, secret and key sources),
policy (mode, entry counts) and OTLP collectors (``host:port``).

For Bedrock the credential source is what botocore's chain will pick given which variables are
set (names only; the values are never read here); the ``provider ready`` line logged once the
provider started shows the source botocore actually resolved.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gateway.config import Settings
from gateway.provider_names import ProviderName


def public_url(url: str | None) -> str | None:
    """``url`` as logs may show it: without ``user:password@``, and its query's values masked
    (``?key=***``: a query may carry a key, ``?subscription-key=`` or ``redis://...?password=``).
    ``None`` stays ``None``; a string that is no URL comes back as it is."""
    if url is None:
        return None
    parts = urlsplit(url)
    if "@" in parts.netloc:
        parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
    elif not parts.query:
        return url
    if parts.query:
        masked = "&".join(f"{pair.partition('=')[0]}=***" for pair in parts.query.split("&") if pair)
        parts = parts._replace(query=masked)
    return parts.geturl()


def public_summary(settings: Settings) -> dict[str, Any]:
    """What start-up logs: the selected provider's endpoint and credential source, egress
    settings; secrets replaced by where they come from."""
    return summary(settings, settings.aws_chain_variables, settings.dropped_url_credentials)


def summary(
    settings: Settings,
    aws_variables: frozenset[str] = frozenset(),
    dropped_url_credentials: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Every setting worth logging at start-up; secrets replaced by where they come from
    (``dropped_url_credentials``: upstream URL variables whose userinfo was dropped, by name)."""
    common: dict[str, Any] = {
        "host": settings.listener.host,
        "port": settings.listener.port,
        "inbound_keys": len(settings.inbound_keys),
        "allow_unauthenticated": settings.auth.allow_unauthenticated,
    }
    several = _upstreams(settings)
    if several is None:  # one upstream, from the environment
        common["provider"] = settings.provider.value
        common.update(upstream(settings, aws_variables))
    egress = {
        "https_proxy": public_url(settings.egress.https_proxy),
        "http_proxy": public_url(settings.egress.http_proxy),
        "no_proxy": settings.egress.no_proxy,
        "ca_bundle": str(settings.egress.ca_bundle) if settings.egress.ca_bundle else None,
        "client_cert": str(settings.egress.client_cert) if settings.egress.client_cert else None,
        "max_body_bytes": settings.listener.max_body_bytes,
        "session_store": public_url(settings.cache.session_store),
        "session_max": settings.cache.session_max,
        "session_max_per_team": settings.cache.session_max_per_team or "an equal share per team",
    }
    dropped = {"url_credentials_ignored": sorted(dropped_url_credentials)} if dropped_url_credentials else {}
    if several is not None:  # the file's upstreams instead: the environment's provider serves none
        common["upstreams"] = several
    return {**common, **egress, **fleet(settings), **dropped}


def _upstreams(settings: Settings) -> list[dict[str, Any]] | None:
    """Each upstream of ``GATEWAY_UPSTREAMS_FILE``: name, provider, endpoint, credential source."""
    if settings.selection.upstreams_file is None:
        return None
    from gateway.upstreams.config import upstreams_of

    loaded = upstreams_of(settings)
    if loaded is None:
        return None
    found = []
    for spec in loaded.upstreams:
        own = spec.settings
        entry: dict[str, Any] = {"name": spec.name, "provider": spec.provider.value}
        entry.update(upstream(own, own.aws_chain_variables))
        if own.dropped_url_credentials:
            entry["url_credentials_ignored"] = sorted(own.dropped_url_credentials)
        found.append(entry)
    return found


def fleet(settings: Settings) -> dict[str, Any]:
    """Sign-in, policy and telemetry forwarding: each key only when it is on."""
    found: dict[str, Any] = {}
    signin = settings.signin
    if signin.oidc_issuer is not None:
        if signin.oidc_client_secret_file is not None:
            secret = f"GATEWAY_OIDC_CLIENT_SECRET_FILE ({signin.oidc_client_secret_file})"
        else:
            secret = (
                "GATEWAY_OIDC_CLIENT_SECRET" if signin.oidc_client_secret else "none (public client, PKCE)"
            )
        keys_file = signin.token_signing_keys_file
        keys = f"GATEWAY_TOKEN_SIGNING_KEYS_FILE ({keys_file})" if keys_file else "generated, in the store"
        store = settings.cache.session_store
        shared = store.startswith(("redis://", "rediss://", "unix://"))
        found["signin"] = {
            "issuer": public_url(signin.oidc_issuer),
            "public_url": public_url(signin.public_url),
            "client_id": signin.oidc_client_id,
            "client_secret": secret,
            "groups_claim": signin.oidc_groups_claim,
            "signing_keys": keys,
            "store": "redis" if shared else ("sqlite file" if signin.signin_state_dir else "memory"),
        }
    policy_file = settings.policy.policy_file
    if policy_file is not None:
        from gateway.fleet.policy_file import PolicyError, load_policy

        try:
            spec = load_policy(policy_file)
            rules: Any = {"mode": spec.mode, "groups": len(spec.groups), "users": len(spec.users)}
        except PolicyError:  # changed since validation: the reloader reports it
            rules = "unreadable"
        counters = "memory" if settings.cache.session_store == "memory" else "redis"
        found["policy"] = {"file": str(policy_file), "rules": rules, "counters": counters}
    if settings.telemetry.otlp_forward_urls:
        found["otlp_forward"] = [_host_port(url) for url in settings.telemetry.otlp_forward_urls]
    return found


def _host_port(url: str) -> str:
    """``host:port`` of a URL (a collector's name in logs and metrics: no path, no query)."""
    parts = urlsplit(url)
    host = parts.hostname or "unknown"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def upstream(settings: Settings, aws_variables: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The selected provider's endpoint and credential source."""
    provider = settings.provider
    if provider is ProviderName.BEDROCK:
        region = settings.bedrock.region or ""
        base = settings.bedrock.base_url or f"https://bedrock-runtime.{region}.amazonaws.com"
        return {
            "region": region,
            "base_url": public_url(base),
            "credential_source": _aws_source(settings, aws_variables),
        }
    if provider is ProviderName.VERTEX:
        from gateway.providers.vertex import vertex_base_url

        region = settings.vertex.region or ""
        return {
            "project": settings.vertex.project_id or "(from the Google credentials)",
            "region": region,
            "base_url": public_url(vertex_base_url(region, settings.vertex.base_url)),
            "credential_source": _google_source(settings.vertex.credentials_file),
        }
    if provider is ProviderName.FOUNDRY:
        from gateway.providers.foundry import foundry_base_url

        return {
            "resource": settings.foundry.resource,
            "base_url": public_url(foundry_base_url(settings)),
            "credential_source": (
                "GATEWAY_FOUNDRY_API_KEY_FILE"
                if settings.foundry.api_key_file is not None
                else "ANTHROPIC_FOUNDRY_API_KEY"
                if settings.foundry.key
                else f"Entra ID (DefaultAzureCredential, scope {settings.foundry.entra_scope})"
            ),
        }
    return {
        "base_url": public_url(settings.anthropic.base_url),
        "credential_source": (
            "ANTHROPIC_API_KEY"
            if settings.anthropic.api_key
            else "ANTHROPIC_AUTH_TOKEN"
            if settings.anthropic.auth_token
            else "none"
        ),
    }


def _aws_source(settings: Settings, present: frozenset[str]) -> str:
    """The first source of botocore's default chain that applies (an explicit profile skips the
    environment keys, as botocore does)."""
    if settings.bedrock.bearer_token_file is not None:
        return "GATEWAY_BEDROCK_BEARER_TOKEN_FILE (Bedrock API key)"
    if settings.bedrock.api_key:
        return "AWS_BEARER_TOKEN_BEDROCK (Bedrock API key)"
    if settings.bedrock.profile:
        return f"AWS profile {settings.bedrock.profile} (shared config and credentials files)"
    if "AWS_ACCESS_KEY_ID" in present:
        return "environment (AWS_ACCESS_KEY_ID)"
    if {"AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"} <= present:
        return "web identity (AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE)"
    if present & {"AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"}:
        return "container credentials"
    return "AWS default chain (shared files, SSO, instance metadata)"


def _google_source(path: Path | None) -> str:
    if path is None:
        return "Application Default Credentials"
    try:
        kind = json.loads(path.read_text(encoding="utf-8")).get("type", "unknown type")
    except (OSError, ValueError, AttributeError):
        kind = "unreadable"
    return f"GOOGLE_APPLICATION_CREDENTIALS ({kind} file {path})"
