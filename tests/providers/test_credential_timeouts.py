"""A token endpoint that accepts the connection and never answers: the credential libraries' own
timeouts (google-auth 120 s, azure-core 300 s) would hold every request waiting for the token for
minutes; ``GATEWAY_CREDENTIAL_TIMEOUT_S`` bounds each call, and the client gets the token failure.

Real google-auth signing a real service-account JWT, posting it to a loopback listener that reads
the request and stays silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
import pytest

from gateway.providers.requests_egress import capped_timeout
from tests.providers.vertex_harness import error_of, vertex_gateway, vertex_upstream, write_service_account

BOUND_S = 0.5


@contextlib.asynccontextmanager
async def silent_endpoint() -> AsyncIterator[tuple[str, list[int]]]:
    """``http://127.0.0.1:<port>/token`` that reads what it is sent and answers nothing; yields the URL
    and how many connections it took."""
    held: list[asyncio.StreamWriter] = []
    accepted: list[int] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        held.append(writer)
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/token", accepted
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_silent_google_token_endpoint_fails_the_request_within_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with vertex_upstream(tmp_path, monkeypatch) as (env, _), silent_endpoint() as (token_uri, accepted):
        credentials = write_service_account(tmp_path, token_uri)
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(credentials))
        env = {**env, "GOOGLE_APPLICATION_CREDENTIALS": str(credentials)}
        async with vertex_gateway(env, GATEWAY_CREDENTIAL_TIMEOUT_S=str(BOUND_S)) as url:
            client = anthropic.AsyncAnthropic(api_key="sk-gw-vertex-test", base_url=url, max_retries=0)
            started = time.monotonic()
            with pytest.raises(anthropic.APIStatusError) as raised:
                await client.messages.create(
                    model="claude-sonnet-4-5",
                    max_tokens=16,
                    messages=[{"role": "user", "content": "hi"}],
                    timeout=60,
                )
            took = time.monotonic() - started
    assert accepted, "google-auth never reached the token endpoint"
    # google-auth may try the endpoint more than once; each try is bounded (not 120 s)
    assert took < BOUND_S * len(accepted) + 5, (took, len(accepted))
    assert raised.value.status_code == 502
    assert "Google access token" in error_of(raised.value)["message"]


@pytest.mark.parametrize(
    ("given", "bound", "expected"),
    [
        (None, 10.0, 10.0),
        (120, 10.0, 10.0),
        (3.5, 10.0, 3.5),
        ((300, 300), 10.0, (10.0, 10.0)),
        ((2, None), 10.0, (2.0, 10.0)),
        (True, 10.0, 10.0),  # not a number of seconds
    ],
)
def test_timeouts_are_capped(given: object, bound: float, expected: object) -> None:
    assert capped_timeout(given, bound) == expected


def test_a_silent_sts_endpoint_times_out_within_the_bound() -> None:
    """botocore's credential clients (``EgressSession``: STS for assumed roles and web identity, SSO)
    read with the bound, not botocore's 60 s."""
    import socket
    import threading

    from botocore import UNSIGNED
    from botocore.config import Config
    from botocore.exceptions import ReadTimeoutError

    from gateway.config import Settings
    from gateway.providers.aws_egress import EgressSession

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(listener.accept()[0]), daemon=True).start()
    try:
        settings = Settings.from_environ({"GATEWAY_CREDENTIAL_TIMEOUT_S": str(BOUND_S)})
        client = EgressSession(settings.egress).create_client(
            "sts",
            region_name="us-east-1",
            endpoint_url=f"http://127.0.0.1:{listener.getsockname()[1]}",
            config=Config(signature_version=UNSIGNED),
        )
        assert client.meta.config.read_timeout == client.meta.config.connect_timeout == BOUND_S
        started = time.monotonic()
        with pytest.raises(ReadTimeoutError):
            client.get_caller_identity()
        assert time.monotonic() - started < BOUND_S + 3
    finally:
        for sock in held:
            sock.close()
        listener.close()
