"""gateway.egress and the credential readiness rule: real library exceptions, no mocks."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import requests
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import BotoCoreError

from gateway.config import Settings
from gateway.egress import EgressKind, classify_sync, host_port, proxy_refusal, scrub, trust_store
from gateway.providers.credentials_health import CredentialFailure, CredentialHealth
from gateway.providers.requests_egress import EgressRequestsSession


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_scrub_removes_userinfo_passwords_and_authorization() -> None:
    text = (
        "ConnectionKey(host='h', proxy=URL('http://corp:s3cret@10.0.0.1:3128'), "
        "proxy_auth=BasicAuth(login='corp', password='s3cret', encoding='latin1')) "
        "{'Proxy-Authorization': 'Basic Y29ycDpzM2NyZXQ='} Authorization: Bearer tok-123"
    )
    cleaned = scrub(text)
    assert "s3cret" not in cleaned and "Y29ycDpzM2NyZXQ=" not in cleaned and "tok-123" not in cleaned
    assert "http://10.0.0.1:3128" in cleaned


def test_host_port_never_shows_userinfo() -> None:
    assert host_port("http://u:p@proxy.corp:3128") == "proxy.corp:3128"
    assert host_port("https://sts.amazonaws.com") == "sts.amazonaws.com:443"
    assert host_port("http://[::1]:8080/x") == "[::1]:8080"
    assert host_port("proxy:3128") == "proxy:3128"


def test_trust_store_names_the_bundle() -> None:
    assert trust_store(None) == "the system trust store"
    assert "/etc/corp-ca.pem" in trust_store(Path("/etc/corp-ca.pem"))


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (407, EgressKind.PROXY_AUTH, False),
        (403, EgressKind.PROXY_REFUSED, False),
        (503, EgressKind.PROXY_ERROR, True),
        (400, EgressKind.PROXY_ERROR, False),
    ],
)
def test_proxy_refusals(status: int, kind: EgressKind, retryable: bool) -> None:
    failure = proxy_refusal(status, None, "proxy:3128", "api.example:443")
    assert (failure.kind, failure.retryable) == (kind, retryable)
    assert str(status) in failure.message and "proxy:3128" in failure.message


def test_requests_through_a_proxy_that_is_not_there() -> None:
    proxy = f"http://u:pw-secret@127.0.0.1:{closed_port()}"
    settings = Settings.from_environ({"HTTPS_PROXY": proxy})
    with EgressRequestsSession(settings.egress) as http, pytest.raises(requests.RequestException) as info:
        http.get(f"https://127.0.0.1:{closed_port()}/token", timeout=5)
    failure = classify_sync(info.value, target="the token endpoint", proxy=proxy, ca_bundle=None)
    assert failure is not None and failure.kind is EgressKind.PROXY_UNREACHABLE
    assert "connection refused" in failure.message and failure.retryable
    assert "pw-secret" not in failure.message


def test_requests_no_proxy_cidr_goes_direct() -> None:
    proxy = f"http://127.0.0.1:{closed_port()}"
    settings = Settings.from_environ({"HTTPS_PROXY": proxy, "NO_PROXY": "10.0.0.0/8,127.0.0.0/8"})
    with EgressRequestsSession(settings.egress) as http, pytest.raises(requests.RequestException) as info:
        http.get(f"https://127.0.0.1:{closed_port()}/token", timeout=5)
    failure = classify_sync(info.value, target="the token endpoint", proxy=None, ca_bundle=None)
    assert failure is not None and failure.kind is EgressKind.UNREACHABLE  # the target, not the proxy


@pytest.mark.parametrize("via_proxy", [True, False])
def test_botocore_sts_client_follows_proxy_and_no_proxy(via_proxy: bool) -> None:
    """``EgressSession`` clients: the proxy from the settings, ``NO_PROXY`` honoured, one attempt."""
    from gateway.providers.aws_egress import EgressSession

    proxy = f"http://u:pw-secret@127.0.0.1:{closed_port()}"
    settings = Settings.from_environ({"HTTPS_PROXY": proxy, "NO_PROXY": "localhost"})
    endpoint = f"https://{'127.0.0.1' if via_proxy else 'localhost'}:{closed_port()}"
    client = EgressSession(settings.egress).create_client(
        "sts",
        region_name="us-east-1",
        endpoint_url=endpoint,
        config=Config(connect_timeout=2, signature_version=UNSIGNED),
    )
    with pytest.raises(BotoCoreError) as info:
        client.get_caller_identity()
    failure = classify_sync(info.value, target="AWS STS", proxy=proxy if via_proxy else None, ca_bundle=None)
    assert failure is not None
    assert failure.kind is (EgressKind.PROXY_UNREACHABLE if via_proxy else EgressKind.UNREACHABLE)
    assert "connection refused" in failure.message and "pw-secret" not in failure.message


def test_credential_failure_statuses() -> None:
    refused = CredentialFailure("the identity provider refused").as_gateway_error()
    assert (refused.status, refused.error_type, refused.should_retry) == (401, "authentication_error", False)
    egress = proxy_refusal(407, None, "p:1", "t:2")
    error = CredentialFailure.from_egress("prefix", egress).as_gateway_error()
    assert (error.status, error.error_type, error.retryable, error.should_retry) == (
        502,
        "api_error",
        False,
        False,
    )
    busy = CredentialFailure("throttled", status=503, retryable=True).as_gateway_error()
    assert (busy.status, busy.retryable, busy.should_retry) == (503, True, None)


def test_health_threshold_recovery_and_recheck() -> None:
    now = [0.0]
    health = CredentialHealth(threshold=3, recheck_s=30.0, clock=lambda: now[0])
    for count in (1, 2):
        health.failed(f"cause {count}")
        assert health.not_ready_reason() is None and not health.recheck_due()
    health.failed("TLS verification failed")
    reason = health.not_ready_reason()
    assert reason is not None and "3 consecutive failures" in reason and "TLS verification failed" in reason
    assert not health.recheck_due()  # the last attempt was just now
    now[0] = 31.0
    assert health.recheck_due() and not health.recheck_due()  # once per interval
    health.succeeded()
    assert health.not_ready_reason() is None and health.consecutive_failures == 0
