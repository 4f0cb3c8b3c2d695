"""A Vertex service-account key rotated under a running gateway: the GOOGLE_APPLICATION_CREDENTIALS
file is read again when Google refuses the old key, and on SIGHUP.

Real google-auth signs real JWTs for the emulator's token endpoint, which verifies them with the
account's public key. The key is rotated in the emulator's own configuration (a new key created,
the old one deleted: ``accept_keys(vertex_service_accounts=...)``) and the new key JSON written over
the file. Two ways a refusal reaches the gateway:

* the cached token expires and its refresh is refused (``invalid_grant``: the usual case, since a
  deleted key leaves the tokens issued with it valid): the file is read inside that token fetch,
  and the request goes to Vertex once, with the new key's token (``x-gateway-retries: 0``);
* Vertex refuses the token (401): the retry loop's credential refresh reads the file first and the
  request is retried once (``x-gateway-retries: 1``), as for Foundry and Bedrock key files.

Clocks: the emulator's and google-auth's follow a ManualClock; the gateway's token cache reads the
same clock (a token expires for both) or a frozen one (Vertex refuses a token the gateway still
thinks valid).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anthropic
import pytest
import requests

from emulators import EmulatorConfig, ManualClock, RunningEmulator, emulator_in_thread
from gateway.app import create_app
from gateway.metrics import GatewayMetrics
from gateway.process import running
from gateway.providers.vertex import VertexProvider
from gateway.providers.vertex_auth import load_google_credentials
from tests.providers.key_rotation import MESSAGES, MODEL, KeyRotationGateway
from tests.providers.vertex_harness import (
    GATEWAY_KEY,
    PROJECT,
    REGION,
    SERVICE_ACCOUNT,
    assert_no_key_material,
    gateway_settings,
    google_auth_follows,
    other_key,
    predict_requests,
    public_pem,
    service_account_key,
    token_requests,
    token_signers,
    vertex_upstream,
    write_service_account,
)
from tests.support.serve_process import serve_process
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)

VARIABLE = "GOOGLE_APPLICATION_CREDENTIALS"


class Gateway(KeyRotationGateway):
    """A Vertex gateway in this event loop, its emulator and key file, and an SDK client."""

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        metrics: GatewayMetrics,
        emulator: RunningEmulator,
        key_file: Path,
    ) -> None:
        super().__init__(client, metrics, "vertex")
        self.emulator = emulator
        self.key_file = key_file

    def rotate_in_google(self) -> None:
        """A new key created for the account and the old one deleted (the file not touched)."""
        self.emulator.accept_keys(vertex_service_accounts={SERVICE_ACCOUNT: public_pem(other_key())})

    def write_new_key(self) -> None:
        """The new key JSON written over the mounted file."""
        write_service_account(
            self.key_file.parent, self.emulator.base_url + "/token", key=other_key(), path=self.key_file
        )

    def rotate(self) -> None:
        """The whole rotation: the new key in Google and in the file, the old one deleted."""
        self.rotate_in_google()
        self.write_new_key()

    def token_signers(self) -> list[str]:
        return token_signers(self.emulator)

    def bearers(self) -> list[str | None]:
        return [r.header("authorization") for r in predict_requests(self.emulator)]


@contextlib.asynccontextmanager
async def _vertex(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, gateway_clock: Callable[[], float] | None = None
) -> AsyncIterator[tuple[Gateway, ManualClock]]:
    """Emulator and gateway on one ManualClock (``gateway_clock``: the token cache's instead)."""
    clock = ManualClock()
    google_auth_follows(monkeypatch, clock)
    async with vertex_upstream(tmp_path, monkeypatch, clock=clock, vertex_token_lifetime_s=3600) as (
        env,
        emulator,
    ):
        settings = gateway_settings(env)
        provider = VertexProvider(settings, clock=gateway_clock or clock.time)
        metrics = GatewayMetrics()
        async with (
            running(create_app(settings, provider, metrics=metrics), "127.0.0.1", 0) as server,
            anthropic.AsyncAnthropic(api_key=GATEWAY_KEY, base_url=server.base_url, max_retries=0) as client,
        ):
            key_file = Path(env[VARIABLE])
            yield Gateway(client, metrics, emulator, key_file), clock


def _key_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "switchyard.upstream_keys"]


async def test_a_rotated_key_is_read_when_the_token_refresh_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with _vertex(tmp_path, monkeypatch) as (gateway, clock):
        assert await gateway.ask() == (200, "0")
        gateway.rotate()
        assert await gateway.ask() == (200, "0")  # the token issued before the deletion still works
        assert token_requests(gateway.emulator) == 1
        clock.advance(3601)  # it expires: its refresh with the old key is refused, the file re-read
        assert await gateway.ask() == (200, "0")  # Vertex was asked once, with the new key's token
        assert await gateway.ask() == (200, "0")
        assert gateway.token_signers() == ["old", "old", "new"]
        first, second, third, fourth = gateway.bearers()
        assert first == second != third == fourth
        assert gateway.credential_retries() == 0
    assert _key_log(caplog) == [
        f"Google credentials re-read from {gateway.key_file} ({VARIABLE}, refused by Google): "
        f"new credentials for {SERVICE_ACCOUNT} in use"
    ]
    assert_no_key_material(caplog.text)


async def test_a_token_vertex_refuses_makes_the_gateway_read_the_file_and_retry_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway's clock stays put while the emulator's moves past the token's expiry: Vertex
    answers 401 to a token the gateway thinks valid; the credential refresh reads the file (new
    key), fetches a token with it and the attempt is retried once."""
    frozen = time.time()
    async with _vertex(tmp_path, monkeypatch, gateway_clock=lambda: frozen) as (gateway, clock):
        assert await gateway.ask() == (200, "0")
        gateway.rotate()
        clock.advance(3601)
        assert await gateway.ask() == (200, "1")
        assert gateway.credential_retries() == 1
        assert await gateway.ask() == (200, "0")
        assert gateway.token_signers() == ["old", "new"]  # the old key was not even tried again
        first, refused, retried, last = gateway.bearers()
        assert first == refused != retried == last


async def test_requests_vertex_refuses_together_all_retry_with_one_new_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen = time.time()
    async with _vertex(tmp_path, monkeypatch, gateway_clock=lambda: frozen) as (gateway, clock):
        assert await gateway.ask() == (200, "0")
        gateway.rotate()
        clock.advance(3601)
        assert list(await asyncio.gather(gateway.ask(), gateway.ask(), gateway.ask())) == [(200, "1")] * 3
        assert gateway.credential_retries() == 3
        assert gateway.token_signers() == ["old", "new"]  # one fetch served all three retries


async def test_a_refusal_after_another_request_got_the_new_token_reuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tasks sent the old token; one is refused, reads the file and fetches a token with the
    new key; the other's refusal arrives only afterwards: it retries with that token, no fetch."""
    clock = ManualClock()
    google_auth_follows(monkeypatch, clock)
    async with vertex_upstream(tmp_path, monkeypatch, clock=clock) as (env, emulator):
        credentials = await load_google_credentials(gateway_settings(env), clock=clock.time)
        try:
            old = await credentials.bearer()
            first_sent, first_retried = asyncio.Event(), asyncio.Event()

            async def late() -> tuple[str, bool]:
                sent = await credentials.bearer()
                first_sent.set()
                await first_retried.wait()
                return sent, await credentials.refresh()

            async def early() -> tuple[str, bool]:
                await first_sent.wait()
                sent = await credentials.bearer()
                emulator.accept_keys(vertex_service_accounts={SERVICE_ACCOUNT: public_pem(other_key())})
                token_uri = emulator.base_url + "/token"
                write_service_account(tmp_path, token_uri, key=other_key(), path=Path(env[VARIABLE]))
                refreshed = await credentials.refresh()
                first_retried.set()
                return sent, refreshed

            assert list(await asyncio.gather(late(), early())) == [(old, True), (old, True)]
            assert await credentials.bearer() != old
            assert token_signers(emulator) == ["old", "new"]
        finally:
            credentials.close()


async def test_requests_in_flight_when_the_token_expires_all_get_the_new_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _vertex(tmp_path, monkeypatch) as (gateway, clock):
        assert await gateway.ask() == (200, "0")
        gateway.rotate()
        clock.advance(3601)
        assert list(await asyncio.gather(gateway.ask(), gateway.ask(), gateway.ask())) == [(200, "0")] * 3
        assert gateway.token_signers() == ["old", "old", "new"]  # one refusal, one re-read
        assert len(set(gateway.bearers()[1:])) == 1


async def test_an_unchanged_file_relays_the_refusal_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The key deleted in Google, the file not (yet) updated: the token refresh is refused and the
    client gets the 401 it got before this change, one token request per request, no retry."""
    caplog.set_level(logging.INFO)
    async with _vertex(tmp_path, monkeypatch) as (gateway, clock):
        assert await gateway.ask() == (200, "0")
        gateway.rotate_in_google()
        clock.advance(3601)
        with pytest.raises(anthropic.AuthenticationError) as info:
            await gateway.client.messages.create(model=MODEL, max_tokens=8, messages=MESSAGES)
        assert info.value.response.headers["x-should-retry"] == "false"
        assert "does not accept this key" in info.value.message
        assert await gateway.ask() == (401, "0")
        assert gateway.token_signers() == ["old"] * 3
        assert len(predict_requests(gateway.emulator)) == 1
        gateway.write_new_key()  # the secret catches up: the next request recovers
        assert await gateway.ask() == (200, "0")
    assert len(_key_log(caplog)) == 1


async def test_an_unchanged_file_after_a_vertex_refusal_is_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frozen = time.time()
    async with _vertex(tmp_path, monkeypatch, gateway_clock=lambda: frozen) as (gateway, clock):
        assert await gateway.ask() == (200, "0")
        gateway.rotate_in_google()
        clock.advance(3601)
        # the token refresh is refused too: that refusal is the answer, headed like any other
        assert await gateway.ask() == (401, "0")
        assert gateway.credential_retries() == 0
        assert gateway.token_signers() == ["old", "old"]  # the refresh's one fetch, refused
        assert len(predict_requests(gateway.emulator)) == 2  # no second attempt


async def test_an_invalid_file_keeps_the_credentials_and_warns_once_per_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with _vertex(tmp_path, monkeypatch) as (gateway, clock):
        assert await gateway.ask() == (200, "0")
        gateway.rotate()
        complete = gateway.key_file.read_text()
        gateway.key_file.write_text(complete[: len(complete) // 2])  # caught mid-write: half a key
        clock.advance(3601)
        assert await gateway.ask() == (401, "0")
        assert await gateway.ask() == (401, "0")  # the same cause: not logged again
        gateway.key_file.write_text(json.dumps({"type": "service_account", "project_id": PROJECT}))
        assert await gateway.ask() == (401, "0")
        gateway.key_file.unlink()
        assert await gateway.ask() == (401, "0")
        assert gateway.token_signers() == ["old"] * 5  # still the credentials of start-up
        gateway.key_file.write_text(complete)
        assert await gateway.ask() == (200, "0")
        path = gateway.key_file
    prefix = f"Google credentials file {path} ({VARIABLE}) not re-read (refused by Google)"
    assert _key_log(caplog) == [
        f"{prefix}: not a JSON credentials file; keeping the credentials in use",
        f"{prefix}: a service-account key without client_email, private_key, token_uri; "
        "keeping the credentials in use",
        f"{prefix}: cannot read it (FileNotFoundError); keeping the credentials in use",
        f"Google credentials re-read from {path} ({VARIABLE}, refused by Google): "
        f"new credentials for {SERVICE_ACCOUNT} in use",
    ]
    warnings = [
        r for r in caplog.records if r.name == "switchyard.upstream_keys" and r.levelno == logging.WARNING
    ]
    assert len(warnings) == 3
    assert_no_key_material(caplog.text)


async def test_application_default_credentials_without_a_file_have_nothing_to_reread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No GOOGLE_APPLICATION_CREDENTIALS in the settings (google-auth's own ADC chain found the
    credentials): SIGHUP has no file to read, refusals refresh the token as before."""
    async with vertex_upstream(tmp_path, monkeypatch) as (env, _):
        settings = gateway_settings({k: v for k, v in env.items() if k != VARIABLE})
        provider = VertexProvider(settings)
        await provider.start()
        try:
            assert provider.describe()["credential_source"] == "application default credentials"
            assert provider.reload_key_file() is None
        finally:
            await provider.close()


def test_sighup_reads_the_new_key_of_a_running_process(tmp_path: Path) -> None:
    """``kill -HUP`` after the secret was updated: the next request fetches its token with the new
    key (the old one already deleted in Google), without waiting for the cached token to expire."""
    config = EmulatorConfig(
        vertex_projects=frozenset({PROJECT}),
        vertex_locations=frozenset({REGION}),
        vertex_tokens=frozenset(),
        vertex_service_accounts={SERVICE_ACCOUNT: public_pem(service_account_key())},
    )
    with emulator_in_thread(config, provider="vertex") as emulator:
        token_uri = emulator.base_url + "/token"
        key_file = write_service_account(tmp_path, token_uri)
        environ = {
            "GATEWAY_API_KEYS": GATEWAY_KEY,
            "GATEWAY_PROVIDER": "vertex",
            "CLOUD_ML_REGION": REGION,
            "ANTHROPIC_VERTEX_PROJECT_ID": PROJECT,
            "ANTHROPIC_VERTEX_BASE_URL": emulator.base_url + "/v1",
            VARIABLE: str(key_file),
        }
        with serve_process(environ, tmp_path / "gateway.log") as gateway:

            def key_lines() -> list[str]:
                lines = [json.loads(line) for line in gateway.stderr().splitlines() if line.startswith("{")]
                return [line["message"] for line in lines if line["logger"] == "switchyard.upstream_keys"]

            assert _post(gateway.base_url) == (200, "0")
            emulator.accept_keys(vertex_service_accounts={SERVICE_ACCOUNT: public_pem(other_key())})
            write_service_account(tmp_path, token_uri, key=other_key(), path=key_file)
            gateway.process.send_signal(signal.SIGHUP)
            wait_until(lambda: len(key_lines()) == 1)
            assert _post(gateway.base_url) == (200, "0")  # a token from the new key: no refusal, no retry
            gateway.process.send_signal(signal.SIGHUP)
            wait_until(lambda: len(key_lines()) == 2)
            assert _post(gateway.base_url) == (200, "0")  # an unchanged file keeps the token
            assert gateway.process.poll() is None
            assert key_lines() == [
                f"Google credentials re-read from {key_file} ({VARIABLE}, SIGHUP): new credentials for "
                f"{SERVICE_ACCOUNT} in use",
                f"Google credentials file {key_file} ({VARIABLE}) unchanged (SIGHUP)",
            ]
            assert_no_key_material(gateway.stderr())
        assert token_signers(emulator) == ["old", "new"]


def _post(url: str) -> tuple[int, str]:
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 8, "messages": MESSAGES}
    response = requests.post(url + "/v1/messages", json=body, headers={"x-api-key": GATEWAY_KEY}, timeout=10)
    return response.status_code, response.headers.get("x-gateway-retries", "")
