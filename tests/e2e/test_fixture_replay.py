"""Replay captured real-client requests through the gateway: the upstream must receive the
client's body byte for byte and every anthropic-* header unchanged."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import orjson
import pytest
import requests

from emulators import EmulatorConfig
from tests.support.sdk_stack import GATEWAY_KEY, UPSTREAM_KEY, Stack, StackFactory

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "real-clients"
FIRST_PARTY = sorted(
    path for path in FIXTURES.glob("*.json") if "bedrock" not in path.name and "vertex" not in path.name
)
SEQUENCES = {
    "cc_tool_bash": ["015_cc_tool_bash_turn1", "016_cc_tool_bash_turn2", "017_cc_tool_bash_turn3"],
    "cc_firstparty_1h": ["025_cc_firstparty_1h_turn1", "026_cc_firstparty_1h_turn2"],
    "cc_interactive": ["074_cc_interactive_title_generation", "075_cc_interactive_turn1"],
}


@pytest.fixture
def stack(make_stack: StackFactory) -> Stack:
    # the emulator enforces the real API's TTL order (1h before 5m): the SDK captures below break
    # it, and only the gateway's normalisation lets them through
    return make_stack(EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY})))


def ttl_order_fixed(body: object) -> object:
    """``body`` as the cache normaliser must send it: any 5m breakpoint that precedes a 1h one
    upgraded to 1h (computed independently of the gateway's code)."""
    fixed = json.loads(json.dumps(body))
    blocks = []
    for section in ("tools", "system"):
        blocks += [b for b in fixed.get(section) or [] if isinstance(b, dict) and "cache_control" in b]
    for message in fixed.get("messages", []):
        if isinstance(message.get("content"), list):
            blocks += [b for b in message["content"] if isinstance(b, dict) and "cache_control" in b]
    last = max((i for i, b in enumerate(blocks) if b["cache_control"].get("ttl") == "1h"), default=-1)
    for block in blocks[: max(last, 0)]:
        control = block["cache_control"]
        if control.get("ttl") != "1h":
            block["cache_control"] = {
                "type": control["type"],
                "ttl": "1h",
                **{k: v for k, v in control.items() if k not in ("type", "ttl")},
            }
    return fixed


def load(name: str) -> dict[str, object]:
    return json.loads((FIXTURES / f"{name}.json").read_text())  # type: ignore[no-any-return]


def client_bytes(fixture: dict[str, object], style: str = "compact") -> bytes:
    """The body as a client would serialise it, key order preserved.

    ``compact`` is what the JS and Python SDKs send; ``spaced`` (indentation, ASCII escapes) is a
    serialisation no re-encoder would reproduce, so byte equality proves nothing re-serialised it.
    """
    if style == "spaced":
        return json.dumps(fixture["body"], indent=1, ensure_ascii=True).encode()
    return json.dumps(fixture["body"], separators=(",", ":"), ensure_ascii=False).encode()


def replay(stack: Stack, fixture: dict[str, object], style: str = "compact") -> requests.Response:
    headers: list[tuple[str, str]] = []
    for name, value in fixture["headers"]:  # type: ignore[attr-defined]
        lower = name.lower()
        if lower in ("host", "content-length", "connection"):
            continue
        if lower == "x-api-key":
            value = GATEWAY_KEY
        elif lower == "authorization":
            value = f"Bearer {GATEWAY_KEY}"
        headers.append((name, value))
    session = requests.Session()
    request = requests.Request(
        fixture["method"],
        stack.gateway_url + fixture["raw_path"],
        data=client_bytes(fixture, style),  # type: ignore[operator]
    ).prepare()
    request.headers.clear()
    for name, value in headers:
        request.headers[name] = value
    request.headers["Content-Length"] = str(len(request.body))  # type: ignore[arg-type]
    return session.send(request, timeout=60, stream=True)


@pytest.mark.parametrize("style", ["compact", "spaced"])
@pytest.mark.parametrize("path", FIRST_PARTY, ids=lambda p: p.stem)
def test_replay_is_byte_identical(stack: Stack, path: Path, style: str) -> None:
    fixture = json.loads(path.read_text())
    response = replay(stack, fixture, style)
    content = response.content
    assert response.status_code == 200, content[:500]
    (received,) = stack.requests
    expected = ttl_order_fixed(fixture["body"])
    if expected == fixture["body"]:
        assert received.body == client_bytes(fixture, style)  # nothing to change: the client's bytes
    else:  # the gateway had to change something: only that, re-serialised deterministically
        assert orjson.loads(received.body) == expected
        assert received.body == orjson.dumps(orjson.loads(received.body))
    sent_anthropic = [(k.lower(), v) for k, v in fixture["headers"] if k.lower().startswith("anthropic-")]
    got_anthropic = [(k.lower(), v) for k, v in received.headers if k.lower().startswith("anthropic-")]
    assert got_anthropic == sent_anthropic
    # other client headers travel too (session id, stainless, x-app); credentials are replaced
    sent_names = {k.lower() for k, _ in fixture["headers"]} - {
        "host",
        "content-length",
        "connection",
        "accept-encoding",
        "authorization",
        "x-api-key",
    }
    got_names = {k.lower() for k, _ in received.headers}
    assert sent_names <= got_names
    assert dict((k.lower(), v) for k, v in received.headers)["x-api-key"] == UPSTREAM_KEY
    if fixture["body"].get("stream"):
        assert b"event: message_stop" in content


@pytest.mark.parametrize("sequence", sorted(SEQUENCES))
def test_replayed_sequences_hit_the_cache(stack: Stack, sequence: str) -> None:
    """Each turn of a Claude Code session reads from cache what the previous turn wrote."""
    usages = []
    for name in SEQUENCES[sequence]:
        response = replay(stack, load(name))
        assert response.status_code == 200
        start = next(
            line
            for line in response.content.split(b"\n")
            if line.startswith(b'data: {"type":"message_start"')
        )
        usages.append(orjson.loads(start[6:])["message"]["usage"])
    assert [r.body for r in stack.requests] == [client_bytes(load(n)) for n in SEQUENCES[sequence]]
    if sequence != "cc_interactive":  # the title call has no cache_control at all
        for previous, current in itertools.pairwise(usages):
            written = previous["cache_read_input_tokens"] + previous["cache_creation_input_tokens"]
            assert current["cache_read_input_tokens"] == written > 0
