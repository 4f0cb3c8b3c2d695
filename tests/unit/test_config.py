from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import Field, ValidationError

from gateway.config import ConfigError, Settings
from gateway.config_checks import aliases_of, leaf_fields
from gateway.keys import KeyRing
from gateway.startup_summary import public_summary


def test_defaults() -> None:
    settings = Settings.from_environ({})
    assert (settings.listener.host, settings.listener.port) == ("127.0.0.1", 8080)
    assert settings.anthropic.base_url == "https://api.anthropic.com"
    assert settings.listener.max_body_bytes == 32 * 1024 * 1024
    assert settings.inbound_keys == ()


def test_settings_are_frozen() -> None:
    settings = Settings.from_environ({})
    with pytest.raises(Exception, match="frozen"):
        settings.listener.port = 1  # type: ignore[misc]


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
        ({"GATEWAY_BETA_POLICY": '{"bedrok": ["x"]}'}, "GATEWAY_BETA_POLICY"),  # was a traceback
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_environ(env)
    assert str(info.value).startswith(variable + ":")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        # accepted before, then every request was a 500 (aiohttp: "cannot convert float infinity")
        ("GATEWAY_UPSTREAM_CONNECT_TIMEOUT_S", "inf"),
        ("GATEWAY_DRAIN_TIMEOUT_S", "inf"),  # "deadline in infs": the drain never ended
        ("GATEWAY_MAX_RETRY_DELAY_S", "1e999"),  # overflows to inf
        ("GATEWAY_STREAM_IDLE_TIMEOUT_S", "Infinity"),
        ("GATEWAY_HEADER_TIMEOUT_S", "nan"),
        ("GATEWAY_API_KEYS_RELOAD_S", "NaN"),  # was "should be less than or equal to 300"
    ],
)
def test_a_number_that_is_not_finite_is_refused(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_environ({variable: value})
    assert str(info.value) == f"{variable}: Input should be a finite number"


def test_every_flag_reads_blank_as_off_and_words_in_any_case() -> None:
    """A flag is a flag: ``GATEWAY_AUTO_CACHE=`` (a blank value in a manifest) was a start-up error
    while every other flag read it as off (it was a plain ``bool``, not ``Flag``)."""
    flags = [name for name, field in leaf_fields(Settings).items() if field.annotation is bool]
    needs = {"AWS_REGION": "us-east-1", "CLOUD_ML_REGION": "us-east5", "ANTHROPIC_FOUNDRY_RESOURCE": "r"}
    assert "cache.auto_cache" in flags and len(flags) >= 10
    for name in flags:
        variable = aliases_of(Settings, name)[0]
        section, _, field = name.partition(".")
        for text, expected in (("", False), (" Off ", False), (" YES ", True), ("on", True)):
            settings = Settings.from_environ({**needs, variable: text})
            assert getattr(getattr(settings, section), field) is expected, (variable, text)


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
    text = repr(settings) + str(public_summary(settings)) + repr(settings.inbound_keys)
    for secret in ("inbound-secret", "upstream-secret", "proxy-secret"):
        assert secret not in text
    assert public_summary(settings)["https_proxy"] == "http://proxy.corp:3128"
    assert public_summary(settings)["credential_source"] == "ANTHROPIC_API_KEY"


def test_proxy_without_scheme_and_lowercase_names() -> None:
    settings = Settings.from_environ({"https_proxy": "proxy.corp:3128", "no_proxy": "localhost"})
    assert settings.egress.https_proxy == "http://proxy.corp:3128"
    assert settings.egress.no_proxy == "localhost"


def test_refuses_to_start_without_keys() -> None:
    with pytest.raises(ConfigError, match="GATEWAY_API_KEYS"):
        Settings.from_environ({}).require_startable()
    Settings.from_environ({"GATEWAY_ALLOW_UNAUTHENTICATED": "1"}).require_startable()
    Settings.from_environ({"GATEWAY_API_KEYS": "k"}).require_startable()


def test_cli_reports_one_line_naming_the_variable() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve"],
        env={"GATEWAY_PORT": "not-a-port", "GATEWAY_API_KEYS": "k", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("switchyard: configuration error: GATEWAY_PORT:")


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--port", "70000"], "--port (GATEWAY_PORT): Input should be less than or equal to 65535"),
        (["--port", "-1"], "--port (GATEWAY_PORT): Input should be greater than or equal to 0"),
        (["--port", "80x"], "--port (GATEWAY_PORT): Input should be a valid integer"),
        (["--host", "no-such-host.invalid"], "--host (GATEWAY_HOST): cannot resolve 'no-such-host.invalid'"),
    ],
)
def test_serve_flags_are_checked_as_their_variables(flags: list[str], line: str) -> None:
    """``--port 70000`` once started on port 4464 (70000 mod 65536), and ``--port -1`` was blamed on
    GATEWAY_HOST: the flags bypassed validation."""
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", *flags],
        env={"GATEWAY_API_KEYS": "k", "ANTHROPIC_API_KEY": "sk-x", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"switchyard: configuration error: {line}")


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


# --- every problem at once, unknown variables, secrets in errors -------------------------------


def _problems(env: dict[str, str]) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as info:
        Settings.from_environ(env)
    assert str(info.value) == "\n".join(info.value.problems)
    return info.value.problems


def test_all_problems_are_reported_bad_values_then_cross_field_then_unknown() -> None:
    problems = _problems(
        {
            "GATEWAY_PORT": "eighty",
            "GATEWAY_LOG_LEVEL": "LOUD",
            "GATEWAY_PROVIDER": "foundry",
            "GATEWAY_DRAIN_DELAY_S": "90",
            "GATEWAY_LOGLEVEL": "DEBUG",
        }
    )
    assert [line.split(":")[0] for line in problems] == [
        "GATEWAY_PORT",
        "GATEWAY_LOG_LEVEL",
        "ANTHROPIC_FOUNDRY_RESOURCE",
        "GATEWAY_DRAIN_DELAY_S",
        "GATEWAY_LOGLEVEL",
    ]
    assert problems[-1] == "GATEWAY_LOGLEVEL: unknown variable (did you mean GATEWAY_LOG_LEVEL?)"


def test_cross_field_checks_of_fields_that_failed_are_skipped() -> None:
    # the idle warning is fine against the default timeout, but its own value is bad: one line only
    problems = _problems({"GATEWAY_STREAM_IDLE_TIMEOUT_S": "soon", "GATEWAY_STREAM_IDLE_WARNING_S": "100"})
    assert len(problems) == 1 and problems[0].startswith("GATEWAY_STREAM_IDLE_TIMEOUT_S: ")
    # a bad provider name: no provider check runs against a guessed provider
    assert len(_problems({"GATEWAY_PROVIDER": "bedrok"})) == 1


def test_cross_field_problems_alone_are_all_reported() -> None:
    problems = _problems(
        {"GATEWAY_PROVIDER": "vertex", "GATEWAY_DRAIN_DELAY_S": "90", "GATEWAY_STREAM_IDLE_WARNING_S": "100"}
    )
    assert [line.split(":")[0] for line in problems] == [
        "CLOUD_ML_REGION",
        "GATEWAY_STREAM_IDLE_WARNING_S",
        "GATEWAY_DRAIN_DELAY_S",
    ]


@pytest.mark.parametrize(
    ("variable", "suggestion"),
    [
        ("GATEWAY_PROVIDR", "GATEWAY_PROVIDER"),
        ("GATEWAY_API_KEY", "GATEWAY_API_KEYS"),
        ("GATEWAY_CA_BUNDEL", "GATEWAY_CA_BUNDLE"),
        ("GATEWAY_AWS_REGION", "AWS_REGION"),  # read without the prefix
    ],
)
def test_unknown_gateway_variable_suggests_the_closest(variable: str, suggestion: str) -> None:
    assert _problems({variable: "x"}) == (f"{variable}: unknown variable (did you mean {suggestion}?)",)


def test_unknown_gateway_variable_without_a_close_name() -> None:
    assert _problems({"GATEWAY_ZZZZZZ": "1"}) == (
        "GATEWAY_ZZZZZZ: unknown variable (switchyard serve --help lists every variable)",
    )


def test_only_the_gateway_prefix_is_closed() -> None:
    Settings.from_environ(
        {"ANTHROPIC_MODEL": "x", "AWS_ACCESS_KEY_ID": "x", "HOME": "/", "gateway_port": "1"}
    )


def test_every_field_alias_is_a_known_variable() -> None:
    from pydantic import AliasChoices

    from gateway.config_checks import alias_index, unknown_variables

    names = []
    for field in leaf_fields(Settings).values():
        if isinstance(field.validation_alias, AliasChoices):
            names.extend(str(choice) for choice in field.validation_alias.choices)
        else:
            names.append(str(field.alias))
    assert set(alias_index(Settings)) == set(names)
    assert unknown_variables(dict.fromkeys(names, "x"), alias_index(Settings)) == []


@pytest.mark.parametrize(
    ("env", "secret"),
    [
        ({"HTTPS_PROXY": "ftp://bob:hunter2-proxy@proxy:21"}, "hunter2-proxy"),
        ({"HTTP_PROXY": "http://bob:hunter2-proxy@proxy:99999"}, "hunter2-proxy"),
        ({"HTTPS_PROXY": "gopher://bob:pa/ss@word@proxy"}, "pa/ss@word"),  # '/' and '@' inside
        ({"GATEWAY_SESSION_STORE": "mysql://u:db-pass-123@db"}, "db-pass-123"),
        ({"ANTHROPIC_BASE_URL": "ftp://u:base-pass-1@h"}, "base-pass-1"),
        ({"ANTHROPIC_FOUNDRY_BASE_URL": "ftp://u:fdy-pass-1@h"}, "fdy-pass-1"),
    ],
)
def test_errors_never_show_url_passwords(env: dict[str, str], secret: str) -> None:
    problems = _problems(env)
    assert len(problems) == 1 and "***@" in problems[0]
    assert secret not in problems[0] and "bob" not in problems[0]


def test_scrub_removes_secret_values_and_userinfo() -> None:
    from gateway.config_checks import redact_url, scrub, secret_fragments

    fragments = secret_fragments(["http://user:pw-123@h:1", "plain"]) | {"sk-secret-key"}
    assert scrub("user:pw-123 and pw-123 and sk-secret-key", fragments) == "*** and *** and ***"
    assert redact_url("proxy.corp:3128") == "proxy.corp:3128"
    assert redact_url("alice:pw@proxy.corp:3128") == "***@proxy.corp:3128"


# --- PEM files are checked at start-up ----------------------------------------------------------


def test_pem_checks(tmp_path: Path) -> None:
    from tests.support.tls import make_pki

    pki = make_pki(tmp_path)
    good = Settings.from_environ(
        {
            "GATEWAY_CA_BUNDLE": str(pki.ca_cert),
            "GATEWAY_CLIENT_CERT": str(pki.client_cert),
            "GATEWAY_CLIENT_KEY": str(pki.client_key),
        }
    )
    assert good.egress.client_key == pki.client_key
    combined = tmp_path / "combined.pem"
    combined.write_bytes(pki.client_cert.read_bytes() + pki.client_key.read_bytes())
    Settings.from_environ({"GATEWAY_CLIENT_CERT": str(combined)})  # key in the same file
    assert _problems({"GATEWAY_CLIENT_CERT": str(pki.client_cert)}) == (
        f"GATEWAY_CLIENT_CERT: no private key in {pki.client_cert} (set GATEWAY_CLIENT_KEY to the key file)",
    )
    assert _problems({"GATEWAY_CA_BUNDLE": str(pki.client_key)}) == (
        f"GATEWAY_CA_BUNDLE: not a PEM CA bundle (no readable certificate in {pki.client_key})",
    )
    assert _problems(
        {"GATEWAY_CLIENT_CERT": str(pki.client_cert), "GATEWAY_CLIENT_KEY": str(pki.server_key)}
    ) == (
        f"GATEWAY_CLIENT_KEY: the key {pki.server_key} does not match the certificate in GATEWAY_CLIENT_CERT",
    )


def test_encrypted_client_key_is_refused_without_prompting(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    from tests.support.tls import make_pki

    pki = make_pki(tmp_path)
    key = serialization.load_pem_private_key(pki.client_key.read_bytes(), password=None)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    (problem,) = _problems(
        {"GATEWAY_CLIENT_CERT": str(pki.client_cert), "GATEWAY_CLIENT_KEY": str(encrypted)}
    )
    assert problem.startswith(f"GATEWAY_CLIENT_KEY: {encrypted} is encrypted;")


# --- the start-up summary names the selected provider's own endpoint and credential -------------


def test_summary_bedrock() -> None:
    settings = Settings.from_environ(
        {
            "GATEWAY_PROVIDER": "bedrock",
            "AWS_REGION": "eu-west-3",
            "AWS_ACCESS_KEY_ID": "AKID",
            "ANTHROPIC_API_KEY": "x",
        }
    )
    summary = public_summary(settings)
    assert summary["region"] == "eu-west-3"
    assert summary["base_url"] == "https://bedrock-runtime.eu-west-3.amazonaws.com"
    assert summary["credential_source"] == "environment (AWS_ACCESS_KEY_ID)"
    assert not any("anthropic" in key for key in summary)
    profile = Settings.from_environ({"GATEWAY_PROVIDER": "bedrock", "AWS_REGION": "x", "AWS_PROFILE": "dev"})
    assert public_summary(profile)["credential_source"].startswith("AWS profile dev")
    identity = Settings.from_environ(
        {
            "CLAUDE_CODE_USE_BEDROCK": "1",
            "AWS_REGION": "x",
            "AWS_ROLE_ARN": "r",
            "AWS_WEB_IDENTITY_TOKEN_FILE": "/t",
        }
    )
    assert public_summary(identity)["credential_source"].startswith("web identity")
    bearer = Settings.from_environ(
        {"GATEWAY_PROVIDER": "bedrock", "AWS_REGION": "x", "AWS_BEARER_TOKEN_BEDROCK": "secret-bearer"}
    )
    assert public_summary(bearer)["credential_source"].startswith("AWS_BEARER_TOKEN_BEDROCK")
    assert "secret-bearer" not in str(public_summary(bearer))


def test_summary_vertex(tmp_path: Path) -> None:
    key_file = tmp_path / "sa.json"
    key_file.write_text('{"type": "service_account"}')
    settings = Settings.from_environ(
        {
            "GATEWAY_PROVIDER": "vertex",
            "CLOUD_ML_REGION": "global",
            "ANTHROPIC_VERTEX_PROJECT_ID": "proj",
            "GOOGLE_APPLICATION_CREDENTIALS": str(key_file),
        }
    )
    summary = public_summary(settings)
    assert (summary["project"], summary["region"]) == ("proj", "global")
    assert summary["base_url"] == "https://aiplatform.googleapis.com/v1"
    assert summary["credential_source"] == f"GOOGLE_APPLICATION_CREDENTIALS (service_account file {key_file})"
    adc = Settings.from_environ({"GATEWAY_PROVIDER": "vertex", "CLOUD_ML_REGION": "us-east5"})
    assert public_summary(adc)["credential_source"] == "Application Default Credentials"


def test_summary_foundry_and_first_party() -> None:
    keyed = Settings.from_environ(
        {
            "GATEWAY_PROVIDER": "foundry",
            "ANTHROPIC_FOUNDRY_RESOURCE": "res",
            "ANTHROPIC_FOUNDRY_API_KEY": "fk-123",
        }
    )
    summary = public_summary(keyed)
    assert summary["base_url"] == "https://res.services.ai.azure.com/anthropic"
    assert summary["credential_source"] == "ANTHROPIC_FOUNDRY_API_KEY" and "fk-123" not in str(summary)
    entra = Settings.from_environ(
        {"GATEWAY_PROVIDER": "foundry", "ANTHROPIC_FOUNDRY_BASE_URL": "https://f/anthropic"}
    )
    assert public_summary(entra)["credential_source"].startswith("Entra ID")
    first = public_summary(
        Settings.from_environ(
            {"ANTHROPIC_AUTH_TOKEN": "t", "ANTHROPIC_BASE_URL": "https://u:base-pw@api.internal"}
        )
    )
    assert first["credential_source"] == "ANTHROPIC_AUTH_TOKEN"
    assert first["base_url"] == "https://api.internal"


# --- serve --help is generated from the fields ---------------------------------------------------


def test_serve_help_lists_every_variable_with_a_description() -> None:
    from gateway.config_checks import aliases_of
    from gateway.config_docs import SECTION_STARTS, field_docstrings, variables_help

    text = variables_help(Settings)
    assert set(SECTION_STARTS) <= set(Settings.model_fields)
    docs = field_docstrings(Settings)
    for name in leaf_fields(Settings):
        assert docs.get(name), f"{name} has no description (add a docstring under the field)"
        line = "  " + " | ".join(aliases_of(Settings, name))
        assert any(row == line or row.startswith(line + "=") for row in text.splitlines()), name
    assert "  GATEWAY_PORT=8080" in text.splitlines()
    assert "  GATEWAY_NORMALISE_BILLING_HEADER=bedrock,vertex" in text.splitlines()
    assert "Egress:" in text.splitlines()


def test_serve_help_from_the_cli() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--help"],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0
    for variable in ("GATEWAY_PROVIDER", "AWS_REGION | AWS_DEFAULT_REGION", "GATEWAY_SESSION_STORE=memory"):
        assert variable in result.stdout


def test_serving_adds_the_open_gateway_check_to_the_others(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_environ({"GATEWAY_PORT": "x"}, serving=True)
    assert [line.split(":")[0] for line in info.value.problems] == [
        "GATEWAY_PORT",
        "GATEWAY_API_KEYS / GATEWAY_API_KEYS_FILE",
    ]
    Settings.from_environ({"GATEWAY_PORT": "1"})  # not serving: no key needed
    keys = tmp_path / "keys"
    keys.write_text("a b c\n")  # a bad keys file is reported once, not also as "no key"
    with pytest.raises(ConfigError) as info:
        Settings.from_environ({"GATEWAY_API_KEYS_FILE": str(keys)}, serving=True)
    assert len(info.value.problems) == 1 and info.value.problems[0].startswith("GATEWAY_API_KEYS_FILE: ")


async def test_provider_ready_line_has_no_url_userinfo(caplog: pytest.LogCaptureFixture) -> None:
    from gateway.app import create_app
    from gateway.process import running

    settings = Settings.from_environ(
        {"ANTHROPIC_API_KEY": "sk-up", "ANTHROPIC_BASE_URL": "http://user:base-pass-1@127.0.0.1:9"}
    )
    with caplog.at_level("INFO", logger="switchyard.server"):
        async with running(create_app(settings), "127.0.0.1", 0):
            pass
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("provider ready")]
    assert '"base_url":"http://127.0.0.1:9"' in line and "base-pass-1" not in line


# --- secret hygiene of the credential variables ---------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("GATEWAY_API_KEYS", "sk-good, sk-bad key-9f3a"),
        ("GATEWAY_METRICS_API_KEYS", "sk-scrape\u00e9-9f3a"),
        ("ANTHROPIC_API_KEY", "sk-upstream-9f3a\n"),
        ("ANTHROPIC_AUTH_TOKEN", "Bearer tok-9f3a"),
        ("AWS_BEARER_TOKEN_BEDROCK", "abs-9f3a\r"),
        ("ANTHROPIC_FOUNDRY_API_KEY", "fk-9f3a\x7f"),
    ],
)
def test_a_key_an_http_header_cannot_carry_is_refused_without_showing_it(variable: str, value: str) -> None:
    problems = _problems({variable: value})
    assert len(problems) == 1 and problems[0].startswith(f"{variable}: holds a character")
    assert "9f3a" not in problems[0]


def test_keys_are_trimmed_between_commas_but_not_inside() -> None:
    settings = Settings.from_environ(
        {"GATEWAY_API_KEYS": " sk-a , sk-b ", "GATEWAY_METRICS_API_KEYS": "sk-m"}
    )
    ring = KeyRing(settings.inbound_keys)
    assert len(ring) == 3
    assert [(k.team, k.role.value) for k in settings.auth.static_keys] == [
        ("default", "client"),
        ("default", "client"),
        ("metrics", "metrics"),
    ]
    assert ring.teams == {"default"}  # metrics keys are nobody's team for quotas and spend


@pytest.mark.parametrize(
    "variable",
    [
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_BEDROCK_BASE_URL",
        "GATEWAY_BEDROCK_CONTROL_URL",
        "ANTHROPIC_VERTEX_BASE_URL",
        "ANTHROPIC_FOUNDRY_BASE_URL",
    ],
)
def test_credentials_in_an_upstream_url_are_dropped_and_named(variable: str) -> None:
    settings = Settings.from_environ({variable: "https://user:url-pass-9f3a@upstream.example:8443/v1"})
    values = [functools.reduce(getattr, path.split("."), settings) for path in leaf_fields(Settings)]
    assert "https://upstream.example:8443/v1" in values
    assert not any("url-pass-9f3a" in str(value) for value in values)
    assert public_summary(settings).get("url_credentials_ignored", [variable]) == [variable]
    assert "url-pass-9f3a" not in repr(settings) + str(public_summary(settings))


def test_proxy_and_redis_urls_keep_their_credentials_out_of_sight() -> None:
    settings = Settings.from_environ(
        {
            "HTTPS_PROXY": "http://u:proxy-pass-9f3a@proxy:3128",
            "GATEWAY_SESSION_STORE": "redis://:r-9f3a@r:6379/0",
        }
    )
    assert settings.egress.https_proxy == "http://u:proxy-pass-9f3a@proxy:3128"  # how the proxy authenticates
    assert "url_credentials_ignored" not in public_summary(settings)
    assert "9f3a" not in repr(settings) + str(public_summary(settings))


@pytest.mark.parametrize(
    "url",
    [
        "redis://:r-pass-9f3a@cache:63x79/0",
        "rediss://user:r-pass-9f3a@cache:6379/0?socket_timeout=soon",
        "memcache://:r-pass-9f3a@cache:11211",
    ],
)
def test_a_redis_url_redis_py_would_refuse_is_a_start_up_error(url: str) -> None:
    problems = _problems({"GATEWAY_SESSION_STORE": url})
    assert len(problems) == 1 and problems[0].startswith("GATEWAY_SESSION_STORE: ")
    assert "r-pass-9f3a" not in problems[0] and "***@cache" in problems[0]


def test_no_problem_line_carries_pydantic_input_values() -> None:
    """Every variable set to a value no setting accepts at once: pydantic's ``input_value=...``
    (which would show a secret) is never part of a line."""
    from gateway.config_checks import alias_index

    environ = dict.fromkeys(alias_index(Settings), "not-valid\x01-9f3a")
    with pytest.raises(ConfigError) as info:
        Settings.from_environ(environ, serving=True)
    text = "\n".join(info.value.problems)
    assert "input_value" not in text and "input_type" not in text
    for secret in ("GATEWAY_API_KEYS", "ANTHROPIC_API_KEY", "AWS_BEARER_TOKEN_BEDROCK", "HTTPS_PROXY"):
        assert any(line.startswith(f"{secret}: ") for line in info.value.problems), secret


# --- sections and flat fields ----------------------------------------------------------------------


class _WithFlatField(Settings):
    """A setting declared flat on ``Settings`` (how work in progress adds one before its section)."""

    flat_limit: int = Field(4, alias="GATEWAY_FLAT_LIMIT", gt=0)
    """A flat setting."""


def test_a_flat_field_is_read_checked_and_listed_like_a_section_field() -> None:
    from gateway.config_docs import variables_help

    settings = _WithFlatField.from_environ({"GATEWAY_FLAT_LIMIT": "7", "GATEWAY_PORT": "9"})
    assert (settings.flat_limit, settings.listener.port) == (7, 9)
    with pytest.raises(ConfigError) as info:
        _WithFlatField.from_environ({"GATEWAY_FLAT_LIMIT": "0", "GATEWAY_FLAT_LIMT": "1", "GATEWAY_PORT": "x"})
    assert [line.split(":")[0] for line in info.value.problems] == [
        "GATEWAY_PORT",
        "GATEWAY_FLAT_LIMIT",
        "GATEWAY_FLAT_LIMT",
    ]
    assert "did you mean GATEWAY_FLAT_LIMIT?" in info.value.problems[-1]
    text = variables_help(_WithFlatField).splitlines()
    assert "  GATEWAY_FLAT_LIMIT=4" in text and "      A flat setting." in text


def test_each_section_is_frozen_and_names_its_own_variables() -> None:
    settings = Settings.from_environ({"GATEWAY_SESSION_MAX": "5", "AWS_DEFAULT_REGION": "eu-west-1"})
    assert settings.cache.session_max == 5 and settings.bedrock.region == "eu-west-1"
    with pytest.raises(ValidationError):
        settings.cache.session_max = 6  # type: ignore[misc]
    sections = {name.partition(".")[0] for name in leaf_fields(Settings)}
    assert sections == set(Settings.model_fields)  # every setting is in a section
