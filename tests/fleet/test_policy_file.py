"""The policy file: validation (one line per problem, naming the field, never the value) and how
entries combine for a principal (layered over the base, or first match)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, Settings
from gateway.fleet.periods import Period
from gateway.fleet.policy import DEFAULT_POLICY, Policy
from gateway.fleet.policy_file import PolicyError, load_policy, parse_policy
from gateway.fleet.principal import Principal, Source

LAYERED = """
organization: {spend_caps: {monthly_usd: 1000}}
base:
  models: {deny: [haiku]}
  spend_caps: {daily_usd: 10, monthly_usd: 100}
  rate_limits: {requests_per_minute: 60}
  managed_settings: {env: {A: "base", B: "base"}, permissions: {deny: ["Bash(rm:*)"]}}
groups:
  - group: eng
    models: {allow: ["claude-sonnet-*", opus]}
    spend_caps: {daily_usd: 20}
    pool: {monthly_usd: 500}
    pool_rate_limits: {requests_per_minute: 600}
    managed_settings: {env: {B: "eng"}}
  - group: contractors
    models: {deny: [opus]}
    spend_caps: {daily_usd: 5}
users:
  - user: Alice@Example.com
    spend_caps: {weekly_usd: 70}
    rate_limits: {concurrent_streams: 2}
"""


def alice(*groups: str) -> Principal:
    return Principal("idp|alice", "idp|alice", groups, "alice@example.com", Source.TOKEN)


def test_layered_entries_combine_over_the_base() -> None:
    policy = Policy(parse_policy(LAYERED, "policy.yaml"))
    effective = policy.for_principal(alice("eng", "contractors"))
    user_caps = {cap.period: cap.limit_usd for cap in effective.caps if cap.scope == "user"}
    # the last entry setting a field wins: contractors' daily 5 over eng's 20; Alice adds a weekly cap
    assert user_caps == {Period.DAILY: 5, Period.MONTHLY: 100, Period.WEEKLY: 70}
    assert [(c.scope, c.owner, c.limit_usd) for c in effective.caps if c.scope != "user"] == [
        ("group", "eng", 500),
        ("org", "", 1000),
    ]
    assert {(r.scope, r.kind, r.limit) for r in effective.rates} == {
        ("user", "requests", 60),
        ("user", "streams", 2),
        ("group", "requests", 600),
    }
    # allow from eng, deny lists add up (base haiku, contractors opus)
    assert effective.models.permits("claude-sonnet-4-5")
    assert not effective.models.permits("claude-opus-4-5")
    assert not effective.models.permits("claude-haiku-4-5")
    assert effective.settings == {"env": {"A": "base", "B": "eng"}, "permissions": {"deny": ["Bash(rm:*)"]}}


def test_first_match_takes_one_entry_over_the_base() -> None:
    policy = Policy(parse_policy("mode: first_match\n" + LAYERED, "policy.yaml"))
    stranger = Principal("key:ops", "ops", ("eng", "contractors"))
    effective = policy.for_principal(stranger)  # no user entry: the first matching group (eng)
    assert {c.period: c.limit_usd for c in effective.caps if c.scope == "user"} == {
        Period.DAILY: 20,
        Period.MONTHLY: 100,
    }
    assert effective.models.permits("claude-opus-4-5")  # contractors' deny is not applied
    # Alice's own entry is her first match (e-mail compared case-insensitively)
    mine = policy.for_principal(alice("eng"))
    assert {c.period: c.limit_usd for c in mine.caps if c.scope == "user"} == {
        Period.DAILY: 10,
        Period.WEEKLY: 70,
        Period.MONTHLY: 100,
    }
    # group pools are shared budgets: they apply in either mode
    assert ("group", "eng") in {(c.scope, c.owner) for c in mine.caps}


def test_admin_caps_name_an_email_in_any_case() -> None:
    spec = parse_policy("base: {}\n", "policy.yaml")
    for owner in ("Alice@Example.com", "ALICE@EXAMPLE.COM", "alice@example.com"):
        policy = Policy(spec, overrides={("user", owner): {Period.DAILY: 1.0}})
        caps = {(c.scope, c.period): c.limit_usd for c in policy.for_principal(alice()).caps}
        assert caps == {("user", Period.DAILY): 1.0}, owner


def test_no_file_is_the_default_policy() -> None:
    effective = DEFAULT_POLICY.for_principal(alice("eng"))
    assert effective.models.unrestricted and not effective.metered and effective.settings is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "base: {spend_caps: {daily_usd: -1}}",
            "policy.yaml: base.spend_caps.daily_usd: Input should be greater than or equal to 0",
        ),
        (
            "base: {rate_limits: {requests_per_minutes: 5}}",
            "policy.yaml: base.rate_limits.requests_per_minutes: Extra inputs are not permitted",
        ),
        ("kill_switch: [gpt]", "policy.yaml: kill_switch.0: Input should be 'opus', 'sonnet' or 'haiku'"),
        ("groups: [{models: {deny: [opus]}}]", "policy.yaml: groups.0.group: Field required"),
        ("mode: sideways", "policy.yaml: mode: Input should be 'layered' or 'first_match'"),
        ("groups: [{group: a}, {group: a}]", "policy.yaml: groups.1: a second entry for the same group"),
        ("- just a list", "policy.yaml: (top level): expected a mapping"),
        (  # the second base would silently replace the first: refused, naming it
            "base: {spend_caps: {daily_usd: 5}}\nbase: {models: {deny: [opus]}}",
            "policy.yaml: duplicate key 'base' at line 2",
        ),
        ("base: {spend_caps: [", "policy.yaml: not valid YAML"),
        ("base: {spend_caps: {weekly_usd: .inf}}", "policy.yaml: base.spend_caps.weekly_usd: Input should be less"),
        (
            "organization: {spend_caps: {daily_usd: 1.0e+303}}",
            "policy.yaml: organization.spend_caps.daily_usd: Input should be less than or equal to 1000000000",
        ),
        (
            "base: {managed_settings: {env: {ROLLOUT: 2026-01-15}}}",
            "policy.yaml: base.managed_settings.env.ROLLOUT: not a JSON value (date)",
        ),
        ("users: [{user: u, managed_settings: {a: [1, .nan]}}]", "policy.yaml: users.0.managed_settings.a.1: not a finite"),
        ("groups: [{group: g, managed_settings: {b: !!binary aGk=}}]", "policy.yaml: groups.0.managed_settings.b: not a JSON"),
        ("base: {managed_settings: {s: !!set {x}}}", "policy.yaml: base.managed_settings.s: not a JSON value (set)"),
        (  # YAML reads hex of any length: the checksum's JSON would refuse it on every request
            "base: {managed_settings: {env: {N: 0x" + "f" * 4000 + "}}}",
            "policy.yaml: base.managed_settings.env.N: an integer beyond 2**53",
        ),
        ("base: {managed_settings: {env: {1: x}}}", "policy.yaml: base.managed_settings.env: a key is not a string (int)"),
        ("groups: [{group: a, pool: {daily_usd: yes}}]", "policy.yaml: groups.0.pool.daily_usd: Input should be a number, not a boolean"),
    ],
)
def test_invalid_files_are_named_field_by_field(text: str, expected: str) -> None:
    with pytest.raises(PolicyError) as raised:
        parse_policy(text, "policy.yaml")
    assert any(line.startswith(expected) for line in raised.value.problems), raised.value.problems
    assert all("\n" not in line for line in raised.value.problems)


def test_secret_looking_values_are_not_echoed(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    path.write_text('{"base": {"spend_caps": {"daily_usd": "sk-ant-very-secret"}}}')
    with pytest.raises(PolicyError) as raised:
        load_policy(path)
    assert "sk-ant-very-secret" not in str(raised.value)
    assert "base.spend_caps.daily_usd" in str(raised.value)


def test_a_bad_file_fails_the_settings_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("base: {spend_caps: {weekly_usd: -3}}\n")
    with pytest.raises(ConfigError) as raised:
        Settings.from_environ({"GATEWAY_API_KEYS": "k", "GATEWAY_POLICY_FILE": str(path)})
    (line,) = [p for p in raised.value.problems if "GATEWAY_POLICY_FILE" in p]
    assert "base.spend_caps.weekly_usd" in line
    path.write_text('{"base": {"spend_caps": {"weekly_usd": 3}}}')  # JSON is YAML too
    assert (
        Settings.from_environ({"GATEWAY_API_KEYS": "k", "GATEWAY_POLICY_FILE": str(path)}).policy.policy_file == path
    )


def test_the_readme_example_is_a_valid_policy() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("## Roll out to a fleet", 1)[1]
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    policy = Policy(parse_policy(example, "README.md"))
    contractor = policy.for_principal(
        Principal("idp|c", "idp|c", ("contractors",), "c@example.com", Source.TOKEN)
    )
    assert not contractor.models.permits("claude-opus-4-5") and contractor.models.permits("claude-sonnet-4-5")
    assert ("group", "contractors", Period.MONTHLY, 2000) in {
        (c.scope, c.owner, c.period, c.limit_usd) for c in contractor.caps
    }
