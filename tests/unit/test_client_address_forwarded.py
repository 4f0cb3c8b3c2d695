"""``gateway.client_address`` with RFC 7239 ``Forwarded`` (``GATEWAY_TRUSTED_PROXY_HEADER=forwarded``):
``for=`` parameters parsed as sections 4 and 6 write them, walked from the right like
X-Forwarded-For; as tables and as properties (hypothesis): hostile header values never raise and
answer an IP literal or the peer, spoofed leftmost elements never win, every address a proxy can
write round-trips."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.client_address import (
    MAX_HOPS,
    client_address,
    forwarded_hops,
    parse_address,
    parse_node,
    parse_trusted_proxies,
)
from gateway.config import ConfigError, Settings

INGRESS = parse_trusted_proxies("10.0.0.0/8, fd00::/8")
PEER = "10.0.0.1"


def forwarded(*values: str, peer: str = PEER) -> str:
    return client_address(peer, values, INGRESS, "forwarded")


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        # RFC 7239 section 4's examples
        (['for="_gazonk"'], PEER),  # obfuscated: the trusted hop stands for the client
        (['For="[2001:db8:cafe::17]:4711"'], "2001:db8:cafe::17"),
        (["for=192.0.2.60;proto=http;by=203.0.113.43"], "192.0.2.60"),
        (["for=192.0.2.43, for=198.51.100.17"], "198.51.100.17"),
        # the brief's example: several elements, quoted IPv6 with a port
        (['for=192.0.2.60;proto=https, for="[2001:db8::17]:4711"'], "2001:db8::17"),
        # case-insensitive parameter names, any parameter order, whitespace around the list commas
        (["proto=https;FOR=198.51.100.1;host=gw.example.com"], "198.51.100.1"),
        (["for=6.6.6.6 ,\tfor=198.51.100.1  "], "198.51.100.1"),
        # quoted IPv4 with a port, an obfuscated port, an escaped character in a quoted-string
        (['for="198.51.100.1:4711"'], "198.51.100.1"),
        (['for="[2001:db8::5]:_p1"'], "2001:db8::5"),
        (['for="198.51.100.1:_x-9"'], "198.51.100.1"),
        (['for="198.51.100.\\1"'], "198.51.100.1"),
        # a spoofed leftmost element: the ingress appended the real client
        (["for=6.6.6.6, for=198.51.100.1"], "198.51.100.1"),
        (["for=6.6.6.6", "for=198.51.100.1"], "198.51.100.1"),  # two header lines
        (['for="6.6.6.6,for=7.7.7.7", for=198.51.100.1'], "198.51.100.1"),  # a comma inside quotes
        # trusted hops skipped; every hop trusted: the farthest one
        (["for=198.51.100.1, for=10.9.9.9;proto=https, for=10.8.8.8"], "198.51.100.1"),
        (['for=10.5.5.5, for="[fd00::9]"'], "10.5.5.5"),
        # empty list elements are ignored (RFC 7230 section 7)
        ([", for=198.51.100.1,, "], "198.51.100.1"),
        # no header: the peer
        ([], PEER),
        ([""], PEER),
        # unknown and obfuscated identifiers end the walk at the hop that reported them
        (["for=198.51.100.1, for=unknown, for=10.9.9.9"], "10.9.9.9"),
        (["for=198.51.100.1, for=_hidden"], PEER),
        # malformed elements end the walk
        (["proto=https"], PEER),  # no for=
        (["for=198.51.100.1;for=6.6.6.6"], PEER),  # a parameter twice
        (["for=2001:db8::5"], PEER),  # IPv6 must be bracketed (and so quoted)
        (['for="2001:db8::5"'], PEER),
        (["for=198.51.100.1:4711"], PEER),  # ':' is no token character: quote it
        (['for="[198.51.100.1]"'], PEER),  # only IPv6 goes in brackets
        (['for="198.51.100.1:123456"'], PEER),  # a port has at most 5 digits
        (['for="198.51.100.1:"'], PEER),
        (['for="[2001:db8::5"'], PEER),
        (['for=" 198.51.100.1"'], PEER),
        (["for = 198.51.100.1"], PEER),  # no whitespace around '='
        (["for="], PEER),
        (["198.51.100.1"], PEER),  # an X-Forwarded-For value is not a Forwarded element
        (['for="198.51.100.1'], PEER),  # an unclosed quoted-string
        (['for="a"b"'], PEER),
        (['for="198.51.100.1\\"'], PEER),  # the closing quote escaped
        # an unclosed quote swallows the rest of its line (the appended client with it), not the next line
        (['for="6.6.6.6, for=198.51.100.1'], PEER),
        (['for="6.6.6.6', "for=198.51.100.1"], "198.51.100.1"),
        # IPv4-mapped IPv6 is its IPv4 address
        (['for="[::ffff:198.51.100.1]"'], "198.51.100.1"),
    ],
)
def test_table(values: list[str], expected: str) -> None:
    assert forwarded(*values) == expected


def test_the_header_kind_is_configured_not_guessed() -> None:
    # an X-Forwarded-For gateway reading a Forwarded value (and the reverse) never finds a client in it
    assert client_address(PEER, ["for=198.51.100.1"], INGRESS) == PEER
    assert client_address(PEER, ["198.51.100.1"], INGRESS, "forwarded") == PEER
    # an untrusted peer's header is ignored
    assert forwarded("for=198.51.100.1", peer="203.0.113.9") == "203.0.113.9"
    assert client_address(PEER, ["for=198.51.100.1"], (), "forwarded") == PEER


def test_the_walk_is_bounded() -> None:
    trusted_chain = ", ".join(f"for=10.0.0.{n}" for n in range(MAX_HOPS))
    assert forwarded(f"for=198.51.100.1, {trusted_chain}") == "10.0.0.0"  # the 32nd hop, not the client
    assert forwarded(f"for=198.51.100.1, {trusted_chain[len('for=10.0.0.0, ') :]}") == "198.51.100.1"
    assert parse_node("1" * 100) is None


def test_forwarded_hops() -> None:
    assert forwarded_hops(['for=a, , proto=x;For="[::1]:80"', 'for="x']) == ["a", "[::1]:80", None]


addresses = st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6))
ports = st.one_of(
    st.none(), st.integers(0, 65535).map(str), st.from_regex(r"_[A-Za-z0-9._-]{1,8}", fullmatch=True)
)


@st.composite
def nodes(draw: st.DrawFn) -> tuple[str, ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """A ``for=`` value as a proxy writes it, and the address it stands for."""
    address = draw(addresses)
    port = draw(ports)
    host = f"[{address}]" if address.version == 6 else str(address)
    node = host if port is None else f"{host}:{port}"
    if ":" in node or draw(st.booleans()):
        node = '"' + node + '"'
    return node, address


@given(node=nodes(), name=st.sampled_from(["for", "For", "FOR"]), extra=st.sampled_from(["", ";proto=https"]))
def test_every_address_a_proxy_writes_round_trips(
    node: tuple[str, ipaddress.IPv4Address | ipaddress.IPv6Address], name: str, extra: str
) -> None:
    text, address = node
    hops = forwarded_hops([f"{name}={text}{extra}"])
    assert len(hops) == 1 and hops[0] is not None
    assert parse_node(hops[0]) == parse_address(str(address))


# hostile values: the characters RFC 7239 gives meaning to, plus anything at all
significant = st.text(alphabet='for=FOR;,"\\[]:_.- \t0123456789abcdef', max_size=80)
hostile = st.one_of(significant, st.text(max_size=80))


@given(peer=st.one_of(addresses.map(str), st.text(max_size=40)), values=st.lists(hostile, max_size=4))
def test_hostile_values_never_raise_and_answer_an_address_or_the_peer(peer: str, values: list[str]) -> None:
    answer = client_address(peer, values, INGRESS, "forwarded")
    assert isinstance(answer, str) and len(answer) <= 64
    if parse_address(peer) is None:
        assert answer == peer[:64]
    else:
        ipaddress.ip_address(answer.split("%")[0])  # always a real address, never header garbage


@given(client=nodes(), spoofed=st.lists(hostile, max_size=3), same_line=st.booleans())
def test_the_leftmost_elements_never_win(
    client: tuple[str, ipaddress.IPv4Address | ipaddress.IPv6Address], spoofed: list[str], same_line: bool
) -> None:
    """Whatever the client sent, the ingress added the real address: as its own header line that
    address is the answer; appended to the client's line it is the answer or (after an unclosed
    quote of the client's) the ingress itself, never anything the client chose."""
    text, address = client
    normalised = parse_address(str(address))  # IPv4-mapped IPv6: its IPv4 address
    assert normalised is not None
    if any(normalised.version == net.version and normalised in net for net in INGRESS):
        return  # a trusted address is not a client
    expected = str(normalised)
    element = f"for={text}"
    values = [", ".join([*spoofed, element])] if same_line else [*spoofed, element]
    answer = forwarded(*values)
    if same_line:
        assert answer in (expected, PEER)
    else:
        assert answer == expected


def test_the_setting() -> None:
    def header(value: str) -> str:
        environ = {"GATEWAY_API_KEYS": "k", "GATEWAY_TRUSTED_PROXY_HEADER": value}
        return Settings.from_environ(environ).listener.trusted_proxy_header

    assert Settings.from_environ({"GATEWAY_API_KEYS": "k"}).listener.trusted_proxy_header == "x-forwarded-for"
    assert header("forwarded") == "forwarded"
    assert header(" Forwarded ") == "forwarded"  # a header name: any case
    assert header("X-Forwarded-For") == "x-forwarded-for"
    for bad in ("x-real-ip", "", "forwarded,x-forwarded-for"):
        with pytest.raises(ConfigError) as raised:
            header(bad)
        assert str(raised.value) == (
            "GATEWAY_TRUSTED_PROXY_HEADER: Input should be 'x-forwarded-for' or 'forwarded'"
        )
