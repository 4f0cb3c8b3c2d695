"""Keys that are not UTF-8 (issue 13, item 2).

Observed before: invalid UTF-8 in ``x-api-key`` or ``Authorization`` was a 500 with a traceback,
no key needed (hashing the presented key encoded it as strict UTF-8; aiohttp hands header bytes
that are not UTF-8 over as lone surrogates). Keys are now hashed and compared as the bytes sent.
"""

from __future__ import annotations

import logging

import pytest

from gateway.config import ConfigError, Settings
from tests.support.error_shape import assert_error
from tests.support.gateway_stack import Connect, StackFactory
from tests.support.log_lines import LogLines
from tests.support.raw_http import request_bytes

BAD_BYTES = [
    b"\xff\xfe",  # not UTF-8 at all
    b"caf\xe9",  # latin-1
    b"\xc3\x28",  # a broken two-byte sequence
    b"\xed\xa0\x80",  # an encoded surrogate
    b"sk-gw-hostile-client\x80",  # the right key and one stray byte
    b"\xf4\x90\x80\x80",  # beyond U+10FFFF
]
ENDPOINTS = [
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens"),
    ("GET", "/v1/models"),
    ("GET", "/v1/sessions/abc"),
    ("GET", "/metrics"),
]
BODY = b'{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}'


@pytest.mark.parametrize("method,path", ENDPOINTS)
def test_keys_that_are_not_utf8_get_401_everywhere(
    make_stack: StackFactory,
    connect: Connect,
    log_lines: LogLines,
    caplog: pytest.LogCaptureFixture,
    method: str,
    path: str,
) -> None:
    stack = make_stack()
    connection = connect(stack)
    body = BODY if method == "POST" else None
    for raw in BAD_BYTES:
        for header, value in (
            (b"x-api-key", raw),
            (b"authorization", b"Bearer " + raw),
            (b"authorization", raw),
        ):
            response = connection.send(request_bytes(method, path, [(header, value)], body))
            assert_error(response, 401, "authentication_error")
            assert raw not in response.body
    assert stack.upstream_count == 0
    assert "Traceback" not in log_lines.text() + caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_configured_key_beyond_ascii_is_refused_at_start_up_without_showing_it() -> None:
    """A key no HTTP header can carry as text never reaches the ring: start-up names the variable,
    not the value (a presented non-UTF-8 key is then a plain 401, tested above)."""
    key = "sk-clé-ü-キー"
    with pytest.raises(ConfigError) as refused:
        Settings.from_environ({"GATEWAY_API_KEYS": key, "ANTHROPIC_API_KEY": "sk-upstream"})
    assert "GATEWAY_API_KEYS" in str(refused.value) and key not in str(refused.value)
