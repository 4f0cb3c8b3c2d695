"""``GATEWAY_UPSTREAMS_FILE``: validated at start-up, one line per problem naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.config import ConfigError, Settings
from gateway.document_files import load_yaml
from gateway.provider_names import ProviderName
from gateway.upstreams.config import upstreams_of

BASE = {"GATEWAY_API_KEYS": "sk-gw"}


def _settings(tmp_path: Path, content: Any, suffix: str = ".json", **env: str) -> Settings:
    path = tmp_path / f"upstreams{suffix}"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return Settings.from_environ({**BASE, "GATEWAY_UPSTREAMS_FILE": str(path), **env})


def _problems(tmp_path: Path, content: Any, suffix: str = ".json", **env: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        upstreams_of(_settings(tmp_path, content, suffix, **env))
    return list(info.value.problems)


def test_yaml_file_builds_one_settings_per_upstream(tmp_path: Path) -> None:
    text = """
upstreams:
  - name: bedrock-us
    provider: bedrock
    region: us-west-2
    model_map: {claude-opus-5-5: us.anthropic.claude-opus-5-5}
  - name: vertex-east
    provider: vertex
    region: us-east5
    project: proj
  - name: first
    provider: anthropic
    credentials: {ANTHROPIC_API_KEY: "${FIRST_KEY}"}
routes:
  - models: ["claude-opus-*"]
    upstreams: [bedrock-us, vertex-east]
    weights: [3, 1]
"""
    settings = _settings(tmp_path, text, ".yaml", FIRST_KEY="sk-ant-first", AWS_REGION="eu-west-1")
    config = upstreams_of(settings)
    assert config is not None
    bedrock, vertex, first = config.upstreams
    assert (bedrock.name, bedrock.provider, bedrock.settings.bedrock.region) == (
        "bedrock-us",
        ProviderName.BEDROCK,
        "us-west-2",
    )
    assert bedrock.settings.provider is ProviderName.BEDROCK
    assert bedrock.settings.models.model_map == {"claude-opus-5-5": "us.anthropic.claude-opus-5-5"}
    assert (vertex.settings.vertex.region, vertex.settings.vertex.project_id) == ("us-east5", "proj")
    assert first.settings.anthropic.api_key is not None
    assert first.settings.anthropic.api_key.get_secret_value() == "sk-ant-first"
    assert settings.bedrock.region == "eu-west-1"  # the base settings are untouched
    assert config.routes[0].weights == (3.0, 1.0)


def test_every_problem_is_one_line_naming_its_field(tmp_path: Path) -> None:
    content = {
        "upstreams": [
            {"name": "a", "provider": "anthropic", "region": "us-east-1"},
            {"name": "b", "provider": "bedrock"},
            {"name": "c", "provider": "foundry", "credentials": {"ANTHROPIC_FOUNDRY_API_KEY": "${NOT_SET}"}},
            {"name": "d", "provider": "vertex", "region": "us-east5", "env": {"GATEWAY_NOPE": "1"}},
            {"name": "a", "provider": "nowhere"},
        ],
        "routes": [{"models": ["*"], "upstreams": ["a", "zz"], "weights": [1]}],
        "breaker": {"failures": 0},
    }
    problems = _problems(tmp_path, content)
    assert all(line.startswith("GATEWAY_UPSTREAMS_FILE: ") for line in problems)
    text = "\n".join(problems)
    assert "upstreams[0]: Value error" not in text
    assert "upstreams[0]: region: anthropic takes no region" in text
    assert "upstreams[4].provider: Input should be" in text
    assert "routes[0]: weights: one weight per upstream" in text
    assert "breaker.failures: Input should be greater than or equal to 1" in text


def test_cross_references_and_per_upstream_settings(tmp_path: Path) -> None:
    content = {
        "upstreams": [
            {"name": "b", "provider": "bedrock"},
            {"name": "c", "provider": "foundry", "credentials": {"ANTHROPIC_FOUNDRY_API_KEY": "${NOT_SET}"}},
            {"name": "d", "provider": "vertex", "region": "us-east5", "env": {"GATEWAY_NOPE": "1"}},
            {"name": "d", "provider": "anthropic", "env": {"GATEWAY_API_KEYS": "x"}},
        ],
        "routes": [{"models": ["*"], "upstreams": ["b", "zz"]}],
    }
    problems = _problems(tmp_path, content)
    assert "GATEWAY_UPSTREAMS_FILE: upstreams[3].name: 'd' is already upstreams[2]" in problems
    assert "GATEWAY_UPSTREAMS_FILE: routes[0].upstreams[1]: no upstream named 'zz'" in problems
    assert (
        "GATEWAY_UPSTREAMS_FILE: upstreams[1].credentials.ANTHROPIC_FOUNDRY_API_KEY: NOT_SET is not set"
        in problems
    )
    assert (
        "GATEWAY_UPSTREAMS_FILE: upstreams[2].env.GATEWAY_NOPE: not a setting of switchyard serve" in problems
    )
    assert (
        "GATEWAY_UPSTREAMS_FILE: upstreams[3].env.GATEWAY_API_KEYS: a gateway-wide setting, not per upstream"
        in problems
    )
    # the upstream's own settings are checked by the same rules as the environment's
    assert any(
        line.startswith("GATEWAY_UPSTREAMS_FILE: upstreams[0] (b): AWS_REGION: required") for line in problems
    ), problems


def test_secrets_never_appear_in_problems(tmp_path: Path) -> None:
    content = {
        "upstreams": [
            {
                "name": "f",
                "provider": "foundry",
                "base_url": "not a url",
                "credentials": {"ANTHROPIC_FOUNDRY_API_KEY": "sk-very-secret-1"},
            },
        ]
    }
    problems = _problems(tmp_path, content)
    assert problems and not any("sk-very-secret-1" in line for line in problems)


def test_unreadable_files(tmp_path: Path) -> None:
    assert _problems(tmp_path, "{not json") == [
        "GATEWAY_UPSTREAMS_FILE: not valid JSON at line 1: Expecting property name enclosed in double quotes"
    ]
    assert _problems(tmp_path, "upstreams: [", ".yaml")[0].startswith(
        "GATEWAY_UPSTREAMS_FILE: not valid YAML at line"
    )
    assert _problems(tmp_path, {"upstreams": []}) == [
        "GATEWAY_UPSTREAMS_FILE: upstreams: List should have at least 1 item after validation, not 0"
    ]
    with pytest.raises(ConfigError) as info:
        Settings.from_environ({**BASE, "GATEWAY_UPSTREAMS_FILE": str(tmp_path / "missing.json")})
    assert info.value.problems[0].startswith("GATEWAY_UPSTREAMS_FILE:")


def test_without_the_file_nothing_changes() -> None:
    settings = Settings.from_environ(BASE)
    assert settings.selection.upstreams_file is None and upstreams_of(settings) is None
    assert settings.source_environ == {}  # the environment is kept only for the upstreams' overlays


def test_env_values_may_be_yaml_numbers_and_booleans(tmp_path: Path) -> None:
    """Unquoted, as YAML writes them (they were refused: ``Input should be a valid string``)."""
    text = """
upstreams:
  - name: first
    provider: anthropic
    credentials: {ANTHROPIC_API_KEY: sk-ant-first}
    env: {GATEWAY_MAX_RETRIES: 3, GATEWAY_NONSTREAMING_FALLBACK: false, GATEWAY_STREAM_IDLE_TIMEOUT_S: 90.5}
routes:
  - models: ["*"]
    upstreams: [first]
"""
    config = upstreams_of(_settings(tmp_path, text, ".yaml"))
    assert config is not None
    resilience = config.upstreams[0].settings.resilience
    assert (resilience.max_retries, resilience.nonstreaming_fallback) == (3, False)
    assert resilience.stream_idle_timeout_s == 90.5
    problems = _problems(tmp_path, text.replace("90.5", "[1, 2]"), ".yaml")
    assert len(problems) == 1 and "GATEWAY_STREAM_IDLE_TIMEOUT_S" in problems[0], problems


def _one(name: str = "first", **extra: Any) -> dict[str, Any]:
    upstream = {"name": name, "provider": "anthropic", "credentials": {"ANTHROPIC_API_KEY": "sk-ant-k"}}
    return {"upstreams": [upstream], "routes": [{"models": ["*"], "upstreams": [name]}], **extra}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        # "first\n" passed (``re.match`` with ``$``): the name became a header value and a label
        (_one("first\n"), "upstreams[0].name: 1-48 characters"),
        ('{"upstreams": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        (_one(affinity={"idle_s": float("inf")}), "affinity.idle_s: Input should be a finite number"),
        (_one(breaker={"open_s": 1e12}), "breaker.open_s: Input should be less than or equal to"),
        (
            {**_one(), "routes": [{"models": ["*"], "upstreams": ["first", "x"], "weights": [1e308, 1e308]}]},
            "routes[0]: weights: their sum must be a finite number",
        ),
        (  # a provider name misspelt: a traceback once the providers were built
            {**_one(), "upstreams": [{**_one()["upstreams"][0], "beta_policy": {"bedrok": ["x"]}}]},
            "upstreams[0].beta_policy.bedrok",
        ),
    ],
)
def test_hostile_values_are_one_line_each(tmp_path: Path, content: Any, expected: str) -> None:
    """Each was accepted, or a traceback (``RecursionError``, ``OverflowError`` later)."""
    text = content if isinstance(content, str) else json.dumps(content).replace("Infinity", "1e999")
    problems = _problems(tmp_path, text)
    assert problems and problems[0].startswith(f"GATEWAY_UPSTREAMS_FILE: {expected}"), problems


def test_a_credential_typed_into_a_key_is_not_shown(tmp_path: Path) -> None:
    """``ANTHROPIC_API_KEY:sk-...`` (no space after the colon) is a key, in YAML: it was printed."""
    text = """
upstreams:
  - name: first
    provider: anthropic
    credentials: {ANTHROPIC_API_KEY:sk-ant-SECRET-4f9a8b7c}
routes:
  - models: ["*"]
    upstreams: [first]
"""
    problems = _problems(tmp_path, text, ".yaml")
    assert len(problems) == 1 and "SECRET" not in problems[0], problems
    assert "upstreams[0].credentials.<a key that is not a variable name>" in problems[0]


def test_thousands_of_problems_are_cut_short(tmp_path: Path) -> None:
    content = {"upstreams": [], "routes": [{"models": list(range(1000)), "upstreams": ["x"]}]}
    problems = _problems(tmp_path, content)
    assert (
        len(problems) == 51 and problems[-1] == "GATEWAY_UPSTREAMS_FILE: ... and 951 more problems"
    )  # (and the empty upstreams list)


def test_a_key_given_twice_is_refused_naming_it(tmp_path: Path) -> None:
    """YAML and JSON loaders keep the last of two equal keys: a whole ``upstreams:`` list (or an
    upstream's credential) would be dropped without a word."""
    yaml_text = """
upstreams:
  - {name: a, provider: anthropic}
routes: []
upstreams:
  - {name: b, provider: anthropic}
"""
    assert _problems(tmp_path, yaml_text, ".yaml") == [
        "GATEWAY_UPSTREAMS_FILE: duplicate key 'upstreams' at line 5"
    ]
    json_text = '{"upstreams": [{"name": "a", "provider": "anthropic", "name": "b"}]}'
    assert _problems(tmp_path, json_text) == ["GATEWAY_UPSTREAMS_FILE: duplicate key 'name'"]
    # a YAML merge key's values may be overridden: that is not a duplicate
    merged = "a: &shared {provider: vertex, region: x}\nb: {<<: *shared, provider: anthropic}\n"
    assert load_yaml(merged)["b"] == {"provider": "anthropic", "region": "x"}


def test_an_empty_credential_reference_is_refused(tmp_path: Path) -> None:
    content = {
        "upstreams": [
            {"name": "f", "provider": "anthropic", "credentials": {"ANTHROPIC_API_KEY": "${EMPTY_KEY}"}}
        ]
    }
    assert _problems(tmp_path, content, EMPTY_KEY="") == [
        "GATEWAY_UPSTREAMS_FILE: upstreams[0].credentials.ANTHROPIC_API_KEY: EMPTY_KEY is empty"
    ]
