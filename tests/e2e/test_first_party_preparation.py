"""Request preparation on the first-party provider: the real anthropic SDK -> gateway -> emulator.

``GATEWAY_MODEL_MAP`` and a ``GATEWAY_BETA_POLICY`` row for ``anthropic`` apply as they do on the
clouds (issue 12); a request none of them touches goes upstream byte for byte.
"""

from __future__ import annotations

import anthropic
import orjson
import pytest
import requests

from tests.support.sdk_stack import GATEWAY_KEY, StackFactory

MAP = '{"fast": "claude-haiku-4-5"}'
USER = [{"role": "user", "content": "Hello there"}]


def test_model_map_applies_on_first_party(make_stack: StackFactory) -> None:
    stack = make_stack(GATEWAY_MODEL_MAP=MAP)
    message = stack.client().messages.create(model="fast", max_tokens=64, messages=USER)
    assert message.type == "message"
    assert stack.requests[-1].json()["model"] == "claude-haiku-4-5"
    with stack.client().messages.stream(model="fast", max_tokens=64, messages=USER) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "end_turn"
    assert stack.requests[-1].json()["model"] == "claude-haiku-4-5"
    counted = stack.client().messages.count_tokens(model="fast", messages=USER)
    assert counted.input_tokens > 0
    assert stack.requests[-1].json()["model"] == "claude-haiku-4-5"


def test_unmapped_model_fails_as_the_upstream_says(make_stack: StackFactory) -> None:
    """Without the map, ``fast`` reaches the upstream as sent: the emulator's 404 is relayed."""
    stack = make_stack()
    with pytest.raises(anthropic.NotFoundError):
        stack.client().messages.create(model="fast", max_tokens=64, messages=USER)
    assert stack.requests[-1].json()["model"] == "fast"


def _post(url: str, body: bytes, **headers: str) -> requests.Response:
    base = {"x-api-key": GATEWAY_KEY, "anthropic-version": "2023-06-01", "content-type": "application/json"}
    return requests.post(f"{url}/v1/messages", data=body, headers={**base, **headers}, timeout=10)


def test_untouched_body_is_forwarded_byte_identical(make_stack: StackFactory) -> None:
    """Odd spacing and key order survive when the map does not name the model; when it does, only
    the model changes (one deterministic re-serialisation)."""
    stack = make_stack(GATEWAY_MODEL_MAP=MAP)
    raw = b'{ "max_tokens" : 32,"model":"claude-sonnet-4-6",  "messages":[{"role":"user","content":"hi"}] }'
    assert _post(stack.gateway_url, raw).status_code == 200
    assert stack.requests[-1].body == raw
    mapped = raw.replace(b"claude-sonnet-4-6", b"fast")
    assert _post(stack.gateway_url, mapped).status_code == 200
    sent = stack.requests[-1]
    assert sent.body != mapped
    assert list(orjson.loads(sent.body)) == ["max_tokens", "model", "messages"]
    assert orjson.loads(sent.body) == {**orjson.loads(mapped), "model": "claude-haiku-4-5"}


def test_first_party_beta_policy_row_applies(make_stack: StackFactory) -> None:
    """The default keeps every beta; an ``anthropic`` row limits them like a cloud's."""
    body = orjson.dumps({"model": "claude-sonnet-4-6", "max_tokens": 16, "messages": USER})
    betas = "context-1m-2025-08-07,interleaved-thinking-2025-05-14"
    open_stack = make_stack()
    assert _post(open_stack.gateway_url, body, **{"anthropic-beta": betas}).status_code == 200
    assert open_stack.requests[-1].header_values("anthropic-beta") == [betas]
    strict = make_stack(GATEWAY_BETA_POLICY='{"anthropic": ["context-1m-2025-08-07"]}')
    assert _post(strict.gateway_url, body, **{"anthropic-beta": betas}).status_code == 200
    assert strict.requests[-1].header_values("anthropic-beta") == ["context-1m-2025-08-07"]
    assert strict.requests[-1].body == body
    dropped = strict.metrics.betas_dropped.labels("anthropic", "interleaved-thinking-2025-05-14")._value.get()
    assert dropped == 1
