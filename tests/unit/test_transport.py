from __future__ import annotations

import pytest

from gateway.config import Settings
from gateway.headers import forwardable_request_headers, relayable_response_headers
from gateway.transport import bypasses_proxy, proxy_for


@pytest.mark.parametrize(
    ("host", "port", "no_proxy", "bypass"),
    [
        ("api.anthropic.com", 443, "", False),
        ("api.anthropic.com", 443, "*", True),
        ("api.anthropic.com", 443, "anthropic.com", True),
        ("api.anthropic.com", 443, ".anthropic.com", True),
        ("anthropic.com", 443, ".anthropic.com", True),
        ("notanthropic.com", 443, "anthropic.com", False),
        ("api.anthropic.com", 443, "anthropic.com:8443", False),
        ("api.anthropic.com", 8443, "anthropic.com:8443", True),
        ("10.1.2.3", 80, "10.0.0.0/8", True),
        ("11.1.2.3", 80, "10.0.0.0/8", False),
        ("127.0.0.1", 80, "localhost,127.0.0.1", True),
        ("::1", 80, "::1", True),
        ("redis.svc.cluster.local", 6379, "svc.cluster.local, .internal", True),
    ],
)
def test_no_proxy_rules(host: str, port: int, no_proxy: str, bypass: bool) -> None:
    assert bypasses_proxy(host, port, no_proxy) is bypass


def test_proxy_chosen_by_scheme() -> None:
    settings = Settings.from_environ(
        {
            "HTTPS_PROXY": "http://secure-proxy:3128",
            "HTTP_PROXY": "http://plain-proxy:3128",
            "NO_PROXY": "internal.corp",
        }
    )
    assert proxy_for("https://api.anthropic.com", settings.egress) == "http://secure-proxy:3128"
    assert proxy_for("http://emulator:8090", settings.egress) == "http://plain-proxy:3128"
    assert proxy_for("https://llm.internal.corp", settings.egress) is None


def test_request_headers_drop_credentials_and_hop_by_hop() -> None:
    inbound = [
        ("Host", "gw"),
        ("x-api-key", "client-secret"),
        ("Authorization", "Bearer client-secret"),
        ("Connection", "keep-alive, X-Custom-Hop"),
        ("X-Custom-Hop", "1"),
        ("Keep-Alive", "5"),
        ("Content-Length", "10"),
        ("Accept-Encoding", "br, zstd"),
        ("anthropic-beta", "a,b"),
        ("X-Stainless-Lang", "js"),
        ("x-app", "cli"),
        ("X-Claude-Code-Session-Id", "s"),
        ("anthropic-version", "2023-06-01"),
        ("api-key", "azure-secret"),
        ("Cookie", "c=1"),
        ("X-Gateway-Tenant", "acme"),
        ("TE", "trailers"),
        ("Proxy-Authorization", "Basic x"),
    ]
    out = forwardable_request_headers(inbound)
    assert out == [
        ("anthropic-beta", "a,b"),
        ("X-Stainless-Lang", "js"),
        ("x-app", "cli"),
        ("X-Claude-Code-Session-Id", "s"),
        ("anthropic-version", "2023-06-01"),
        ("X-Gateway-Tenant", "acme"),
    ]


def test_missing_version_gets_default() -> None:
    assert forwardable_request_headers([("x-app", "cli")]) == [
        ("x-app", "cli"),
        ("anthropic-version", "2023-06-01"),
    ]


def test_response_headers_drop_framing() -> None:
    upstream = [
        ("Content-Type", "text/event-stream"),
        ("Content-Length", "5"),
        ("Content-Encoding", "gzip"),
        ("Transfer-Encoding", "chunked"),
        ("request-id", "req_1"),
        ("Set-Cookie", "__cf_bm=x"),
        ("anthropic-ratelimit-requests-remaining", "5"),
        ("Connection", "close"),
        ("retry-after", "3"),
    ]
    assert relayable_response_headers(upstream) == [
        ("Content-Type", "text/event-stream"),
        ("request-id", "req_1"),
        ("anthropic-ratelimit-requests-remaining", "5"),
        ("retry-after", "3"),
    ]
