from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import ConfigError, Settings
from gateway.keys import KeyRing


def test_defaults() -> None:
    settings = Settings.from_environ({})
    assert (settings.host, settings.port) == ("127.0.0.1", 8080)
    assert settings.anthropic_base_url == "https://api.anthropic.com"
    assert settings.max_body_bytes == 32 * 1024 * 1024
    assert settings.inbound_keys == ()


def test_settings_are_frozen() -> None:
    settings = Settings.from_environ({})
    with pytest.raises(Exception, match="frozen"):
        settings.port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"GATEWAY_PORT": "eighty"}, "GATEWAY_PORT"),
        ({"GATEWAY_PORT": "70000"}, "GATEWAY_PORT"),
        ({"GATEWAY_CA_BUNDLE": "/nonexistent/ca.pem"}, "GATEWAY_CA_BUNDLE"),
        ({"SSL_CERT_FILE": "/nonexistent/ca.pem"}, "SSL_CERT_FILE"),
        ({"GATEWAY_API_KEYS_FILE": "/nonexistent/keys"}, "GATEWAY_API_KEYS_FILE"),
        ({"GATEWAY_CLIENT_CERT": "/nonexistent/cert.pem"}, "GATEWAY_CLIENT_CERT"),
        ({"ANTHROPIC_BASE_URL": "ftp://example.com"}, "ANTHROPIC_BASE_URL"),
        ({"GATEWAY_MAX_BODY_BYTES": "-1"}, "GATEWAY_MAX_BODY_BYTES"),
        ({"GATEWAY_ALLOW_UNAUTHENTICATED": "maybe"}, "GATEWAY_ALLOW_UNAUTHENTICATED"),
        ({"GATEWAY_LOG_LEVEL": "LOUD"}, "GATEWAY_LOG_LEVEL"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_environ(env)
    assert str(info.value).startswith(variable + ":")
    assert "\n" not in str(info.value)


def test_client_key_without_cert(tmp_path: Path) -> None:
    key = tmp_path / "k.pem"
    key.write_text("x")
    with pytest.raises(ConfigError, match="GATEWAY_CLIENT_KEY"):
        Settings.from_environ({"GATEWAY_CLIENT_KEY": str(key)})


def test_unreadable_key_file_is_reported(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("a b c\n")
    with pytest.raises(ConfigError, match=r"GATEWAY_API_KEYS_FILE: .*expected 'key \[team\]'"):
        Settings.from_environ({"GATEWAY_API_KEYS_FILE": str(keys)})


def test_keys_from_list_and_file_with_teams(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# comment\n\nsk-a team-a\nsk-b\n")
    settings = Settings.from_environ(
        {"GATEWAY_API_KEYS": " sk-x , ,sk-y", "GATEWAY_API_KEYS_FILE": str(keys)}
    )
    ring = KeyRing(settings.inbound_keys)
    assert len(ring) == 4
    assert ring.team_for("sk-a") == "team-a"
    assert ring.team_for("sk-b") == "default"
    assert ring.team_for("sk-x") == "default"
    assert ring.team_for("sk-") is None
    assert ring.team_for("") is None


def test_secrets_never_in_repr_or_summary() -> None:
    settings = Settings.from_environ(
        {
            "GATEWAY_API_KEYS": "inbound-secret",
            "ANTHROPIC_API_KEY": "upstream-secret",
            "HTTPS_PROXY": "http://user:proxy-secret@proxy.corp:3128",
        }
    )
    text = repr(settings) + str(settings.public_summary()) + repr(settings.inbound_keys)
    for secret in ("inbound-secret", "upstream-secret", "proxy-secret"):
        assert secret not in text
    assert settings.public_summary()["https_proxy"] == "http://proxy.corp:3128"
    assert settings.public_summary()["upstream_credential"] == "ANTHROPIC_API_KEY"


def test_proxy_without_scheme_and_lowercase_names() -> None:
    settings = Settings.from_environ({"https_proxy": "proxy.corp:3128", "no_proxy": "localhost"})
    assert settings.https_proxy == "http://proxy.corp:3128"
    assert settings.no_proxy == "localhost"


def test_refuses_to_start_without_keys() -> None:
    with pytest.raises(ConfigError, match="GATEWAY_API_KEYS"):
        Settings.from_environ({}).require_startable()
    Settings.from_environ({"GATEWAY_ALLOW_UNAUTHENTICATED": "1"}).require_startable()
    Settings.from_environ({"GATEWAY_API_KEYS": "k"}).require_startable()


def test_cli_reports_one_line_naming_the_variable() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve"],
        env={"GATEWAY_PORT": "not-a-port", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("switchyard: configuration error: GATEWAY_PORT:")


def test_cli_refuses_open_gateway() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve"],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "GATEWAY_ALLOW_UNAUTHENTICATED=1" in result.stderr
