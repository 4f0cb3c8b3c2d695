"""What the real Claude Code CLI sends a gateway whose tokens carry ``billing_group_tag`` and whose
managed settings push ``CLAUDE_CODE_GATEWAY_HINT_HEADERS=1``, with a bearer from the sign-in flow.

Observed with 2.1.332: in gateway mode (``CLAUDE_CODE_USE_GATEWAY=1`` with ``ANTHROPIC_BASE_URL`` and
``ANTHROPIC_AUTH_TOKEN``) it reads the claim from the token and, when a billing group is named
(``CLAUDE_CODE_ATTRIBUTION_PROJECT`` or the ``attributionProject`` setting), sends
``"tags": {"<claim>": "<group>"}`` on ``/v1/messages``, without the request-tags beta; without
gateway mode it sends no tags. A ``claude -p`` run does not fetch ``/managed/settings`` (only a
``/login`` sign-in does), so it has no managed ``env`` and sends no checksum hint: counted unknown.
"""

from __future__ import annotations

import re
from pathlib import Path

from gateway.fleet.settings_hint import HINT_HEADER
from tests.fleet_signin.signin_stack import claims_of, signin_stack
from tests.support.claude_code import claude_env, cli, run_claude, versions_under_test

METRICS_KEY = "sk-gw-tags-metrics"
POLICY = """
groups:
  - group: eng
    managed_settings: {env: {CLAUDE_CODE_GATEWAY_HINT_HEADERS: "1"}}
"""


def counts(exposition: str, metric: str) -> dict[str, float]:
    return {
        labels: float(value) for labels, value in re.findall(rf"{metric}\{{([^}}]*)\}} (\S+)", exposition)
    }


async def test_claude_code_names_its_billing_group_in_tags(tmp_path: Path) -> None:
    binary = cli(versions_under_test()[-1])
    workdir = tmp_path / "work"
    workdir.mkdir()
    (tmp_path / "policy.yaml").write_text(POLICY)
    async with signin_stack(
        tmp_path,
        GATEWAY_POLICY_FILE=str(tmp_path / "policy.yaml"),
        GATEWAY_BILLING_GROUP_TAG="team",
        GATEWAY_METRICS_API_KEYS=METRICS_KEY,
    ) as stack:
        bearer = (await stack.sign_in())["access_token"]  # alice: eng and platform
        assert claims_of(bearer)["billing_group_tag"] == "team"
        runs = {}
        for mode, extra in (
            ("gateway", {"CLAUDE_CODE_USE_GATEWAY": "1"}),
            ("plain", {}),
        ):
            before = len(stack.emulator.requests)
            env = claude_env(
                tmp_path / f"home-{mode}",
                ANTHROPIC_BASE_URL=stack.gateway_url,
                ANTHROPIC_AUTH_TOKEN=bearer,
                CLAUDE_CODE_ATTRIBUTION_PROJECT="platform",
                **extra,
            )
            run = await run_claude(binary, ("-p", "say hi", "--model", "claude-sonnet-4-5"), env, workdir)
            assert run.result is not None and not run.result.get("is_error"), run.describe()
            runs[mode] = [
                r for r in list(stack.emulator.requests)[before:] if r.path.startswith("/v1/messages")
            ]
            assert runs[mode], mode
        for call in runs["gateway"]:
            assert call.json()["tags"] == {"team": "platform"}
            assert "request-tags" not in ",".join(call.header_values("anthropic-beta"))
        for call in runs["plain"]:
            assert "tags" not in call.json()
        async with stack.http.get(
            f"{stack.gateway_url}/metrics", headers={"x-api-key": METRICS_KEY}
        ) as response:
            exposition = await response.text()
    billing = counts(exposition, "gateway_fleet_billing_group_tags_total")
    assert billing == {'outcome="applied"': len(runs["gateway"]), 'outcome="ignored"': 0}
    hints = counts(exposition, "gateway_fleet_managed_settings_hints_total")
    sent = {mode: [call.header(HINT_HEADER) for call in calls] for mode, calls in runs.items()}
    assert sent == {mode: [None] * len(calls) for mode, calls in runs.items()}  # see the docstring
    # tagged requests count under the group they name; untagged ones under the caller's first group
    assert hints['group="platform",state="unknown"'] == len(runs["gateway"])
    assert hints['group="eng",state="unknown"'] == len(runs["plain"])
