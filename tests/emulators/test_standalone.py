"""The emulator CLI's (`python -m emulators`) set-up in-process: option checks, the printed environment, certificates."""

from __future__ import annotations

import json
import shlex
import ssl
from pathlib import Path

import pytest

from emulators.bedrock_config import get_bedrock_state
from emulators.standalone import (
    EmulateError,
    EmulateOptions,
    certificate_hosts,
    client_env,
    credentials_line,
    export_line,
    prepare,
)
from emulators.state import get_state
from emulators.tls import server_certificate


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (EmulateOptions(chunk_delay_s=-0.5), "--chunk-delay: must be >= 0"),
        (
            EmulateOptions(provider="bedrock", aws_secret_access_key="s"),
            "--aws-access-key-id and --aws-secret-access-key go together",
        ),
        (EmulateOptions(provider="nope"), "--provider: unknown provider 'nope'"),
    ],
)
def test_bad_options(options: EmulateOptions, message: str, tmp_path: Path) -> None:
    with pytest.raises(EmulateError) as info:
        prepare(options, tmp_path)
    assert str(info.value) == message


def test_tls_dir_that_is_a_file(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(EmulateError, match=r"^--tls: cannot write the certificate in .*file: File exists"):
        prepare(EmulateOptions(tls_dir=blocker), tmp_path)


def test_api_keys_replace_each_providers_defaults(tmp_path: Path) -> None:
    keys = ("k-one", "k-two")
    anthropic = get_state(prepare(EmulateOptions(api_keys=keys), tmp_path).app).config
    assert anthropic.api_keys == frozenset(keys)
    foundry = get_state(prepare(EmulateOptions(provider="foundry", api_keys=keys), tmp_path).app).config
    assert foundry.foundry_api_keys == frozenset(keys)
    vertex = get_state(prepare(EmulateOptions(provider="vertex", api_keys=keys), tmp_path).app).config
    assert vertex.vertex_tokens == frozenset(keys)
    bedrock = prepare(EmulateOptions(provider="bedrock", api_keys=keys, aws_region="eu-west-3"), tmp_path)
    options = get_bedrock_state(bedrock.app).options
    assert options.api_keys == frozenset(keys) and options.region == "eu-west-3"


def test_bedrock_env_uses_the_api_key_when_only_that_was_given(tmp_path: Path) -> None:
    prepared = prepare(EmulateOptions(provider="bedrock", api_keys=("brk",)), tmp_path)
    env = client_env(prepared, "http://127.0.0.1:1")
    assert env["AWS_BEARER_TOKEN_BEDROCK"] == "brk" and "AWS_ACCESS_KEY_ID" not in env
    assert "brk" in credentials_line(prepared)


def test_vertex_account_generated_into_the_workdir(tmp_path: Path) -> None:
    prepared = prepare(EmulateOptions(provider="vertex"), tmp_path)
    assert prepared.account is not None and prepared.account_path == tmp_path / "vertex-service-account.json"
    registered = get_state(prepared.app).config.vertex_service_accounts
    assert registered == {prepared.account.email: prepared.account.public_key_pem}


def test_vertex_account_file_that_is_not_one(tmp_path: Path) -> None:
    bad = tmp_path / "adc.json"
    bad.write_text(json.dumps({"type": "authorized_user"}))
    with pytest.raises(EmulateError, match=r"--vertex-service-account: .*not a service-account key file"):
        prepare(EmulateOptions(provider="vertex", vertex_service_account=bad), tmp_path)


def test_export_line_round_trips_through_a_shell_parser() -> None:
    env = {"A": "plain", "B": "with space", "C": "it's $HOME `x`", "D": "wJal/K7+KEY"}
    words = shlex.split(export_line(env))
    assert words[0] == "export"
    assert dict(word.split("=", 1) for word in words[1:]) == env


def test_certificate_is_reused_while_it_fits_and_remade_when_not(tmp_path: Path) -> None:
    first = server_certificate(tmp_path, certificate_hosts("127.0.0.1"))
    assert not first.reused and oct(first.key.stat().st_mode & 0o777) == "0o600"
    ca = first.ca.read_bytes()
    again = server_certificate(tmp_path, certificate_hosts("127.0.0.1"))
    assert again.reused and again.ca.read_bytes() == ca
    other = server_certificate(tmp_path, certificate_hosts("emu.internal"))
    assert not other.reused and other.ca.read_bytes() != ca
    trusting = ssl.create_default_context(cafile=str(other.ca))  # loads as a trust anchor
    assert trusting.get_ca_certs()[0]["subject"] == ((("commonName", "switchyard emulator CA"),),)
