"""``gateway.client_address``: the client behind trusted reverse proxies (X-Forwarded-For walked
from the right), as tables and as properties (hypothesis): spoofed leftmost entries never win,
an untrusted peer's header is ignored, garbage never raises."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.client_address import client_address, parse_address, parse_trusted_proxies
from gateway.config import ConfigError, Settings

INGRESS = parse_trusted_proxies("10.0.0.0/8, fd00::/8")


@pytest.mark.parametrize(
    ("peer", "forwarded", "trusted", "expected"),
    [
        # no trusted proxies configured: always the TCP peer
        ("203.0.113.9", ["198.51.100.1"], "", "203.0.113.9"),
        # an untrusted peer's header is ignored (a spoofer cannot pick its bucket)
        ("203.0.113.9", ["198.51.100.1"], "10.0.0.0/8", "203.0.113.9"),
        # the ingress appended the client
        ("10.1.2.3", ["198.51.100.1"], "10.0.0.0/8", "198.51.100.1"),
        # a spoofed leftmost entry: the ingress appended the real client to the right of it
        ("10.1.2.3", ["6.6.6.6, 198.51.100.1"], "10.0.0.0/8", "198.51.100.1"),
        ("10.1.2.3", ["6.6.6.6", "198.51.100.1"], "10.0.0.0/8", "198.51.100.1"),  # two header lines
        # a chain of trusted hops is skipped
        ("10.1.2.3", ["6.6.6.6, 198.51.100.1, 10.9.9.9, 10.8.8.8"], "10.0.0.0/8", "198.51.100.1"),
        # every hop trusted: the farthest one
        ("10.1.2.3", ["10.5.5.5, 10.9.9.9"], "10.0.0.0/8", "10.5.5.5"),
        # no header from a trusted peer: the peer
        ("10.1.2.3", [], "10.0.0.0/8", "10.1.2.3"),
        # garbage where the client should be: the trusted hop that sent it
        ("10.1.2.3", ["not-an-ip"], "10.0.0.0/8", "10.1.2.3"),
        ("10.1.2.3", ["198.51.100.1, unknown, 10.9.9.9"], "10.0.0.0/8", "10.9.9.9"),
        ("10.1.2.3", [""], "10.0.0.0/8", "10.1.2.3"),
        ("10.1.2.3", ["198.51.100.1,"], "10.0.0.0/8", "10.1.2.3"),  # a trailing empty entry
        ("10.1.2.3", ["1.2.3.4:5:6"], "10.0.0.0/8", "10.1.2.3"),
        ("10.1.2.3", ["[::1"], "10.0.0.0/8", "10.1.2.3"),
        ("10.1.2.3", ["1.2.3.4:http"], "10.0.0.0/8", "10.1.2.3"),
        # ports as some proxies write them
        ("10.1.2.3", ["198.51.100.1:4711"], "10.0.0.0/8", "198.51.100.1"),
        ("10.1.2.3", ["[2001:db8::5]:4711"], "10.0.0.0/8", "2001:db8::5"),
        # IPv6: addresses normalised, trusted ranges by family
        ("fd00::1", ["2001:DB8:0:0::5"], "fd00::/8", "2001:db8::5"),
        ("fd00::1", ["2001:db8::5, fd12::9"], "fd00::/8", "2001:db8::5"),
        ("2001:db8::7", ["198.51.100.1"], "fd00::/8", "2001:db8::7"),
        # IPv4-mapped IPv6 is its IPv4 address, for trust and as the key
        ("::ffff:10.1.2.3", ["::ffff:198.51.100.1"], "10.0.0.0/8", "198.51.100.1"),
        # a single trusted address (no prefix length)
        ("192.0.2.10", ["198.51.100.1"], "192.0.2.10", "198.51.100.1"),
        ("192.0.2.11", ["198.51.100.1"], "192.0.2.10", "192.0.2.11"),
        # no peer (a Unix socket): a fixed key
        (None, ["198.51.100.1"], "10.0.0.0/8", "unknown"),
    ],
)
def test_table(peer: str | None, forwarded: list[str], trusted: str, expected: str) -> None:
    assert client_address(peer, forwarded, parse_trusted_proxies(trusted)) == expected


def test_parse_address() -> None:
    assert parse_address(" 198.51.100.1 ") == ipaddress.ip_address("198.51.100.1")
    assert parse_address("[::1]") == ipaddress.ip_address("::1")
    assert parse_address("1" * 100) is None
    assert parse_address("_hidden") is None  # an RFC 7239 obfuscated identifier


def _ingress(text: str) -> bool:
    address = parse_address(text)
    assert address is not None
    return any(address.version == net.version and address in net for net in INGRESS)


addresses = st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)).map(str)
junk = st.text(max_size=40)


@given(client=addresses, spoofed=st.lists(st.one_of(addresses, junk), max_size=5))
def test_the_leftmost_entries_never_win(client: str, spoofed: list[str]) -> None:
    """Whatever the client put in the header, the trusted ingress appended the real address."""
    expected = client_address(client, [], ())  # the address as the gateway writes it
    if _ingress(expected):
        return  # a trusted address is not a client
    header = ", ".join([*spoofed, client])
    assert client_address("10.0.0.1", [header], INGRESS) == expected


@given(peer=addresses, header=st.lists(junk, max_size=4))
def test_an_untrusted_peer_is_the_client(peer: str, header: list[str]) -> None:
    if _ingress(peer):
        return
    assert client_address(peer, header, INGRESS) == client_address(peer, [], ())


@given(peer=st.one_of(addresses, junk), header=st.lists(st.one_of(addresses, junk), max_size=6))
def test_never_raises_and_answers_an_address_or_the_peer(peer: str, header: list[str]) -> None:
    answer = client_address(peer, header, INGRESS)
    assert isinstance(answer, str) and len(answer) <= 64
    if parse_address(peer) is not None:
        ipaddress.ip_address(answer.split("%")[0])  # always a real address, never header garbage


def test_the_setting() -> None:
    settings = Settings.from_environ(
        {"GATEWAY_API_KEYS": "k", "GATEWAY_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.1"}
    )
    assert [str(net) for net in settings.listener.trusted_proxies] == ["10.0.0.0/8", "192.0.2.1/32"]
    assert Settings.from_environ({"GATEWAY_API_KEYS": "k"}).listener.trusted_proxies == ()
    with pytest.raises(ConfigError, match=r"GATEWAY_TRUSTED_PROXIES: '10\.0\.0\.0/33' is not an IP address"):
        Settings.from_environ({"GATEWAY_API_KEYS": "k", "GATEWAY_TRUSTED_PROXIES": "10.0.0.0/33"})
