"""The real Claude Code CLI with ``ANTHROPIC_AUTH_TOKEN`` = a bearer minted by the sign-in flow
(against the real OIDC IdP) completes a ``claude -p`` run through the gateway to the emulator; the
sign-in bearer never reaches the upstream; once revoked, the same CLI run is refused with 401."""

from __future__ import annotations

from pathlib import Path

from tests.fleet_signin.signin_stack import UPSTREAM_KEY, signin_stack
from tests.support.claude_code import claude_env, cli, run_claude, versions_under_test


async def test_claude_code_runs_with_a_signed_in_bearer(tmp_path: Path) -> None:
    binary = cli(versions_under_test()[-1])
    workdir = tmp_path / "work"
    workdir.mkdir()
    async with signin_stack(tmp_path) as stack:
        tokens = await stack.sign_in()
        bearer = tokens["access_token"]
        env = claude_env(tmp_path / "home", ANTHROPIC_BASE_URL=stack.gateway_url, ANTHROPIC_AUTH_TOKEN=bearer)
        run = await run_claude(binary, ("-p", "say hi"), env, workdir)
        assert run.result is not None and not run.result.get("is_error"), run.describe()
        calls = [request for request in stack.emulator.requests if request.path.startswith("/v1/messages")]
        assert calls, [request.path for request in stack.emulator.requests]
        for call in calls:
            sent = dict((name.lower(), value) for name, value in call.headers)
            assert sent.get("x-api-key") == UPSTREAM_KEY
            assert all(bearer not in value for value in sent.values())

        status, _ = await stack.form_post(stack.metadata["revocation_endpoint"], {"token": bearer})
        assert status == 200
        before = len(stack.emulator.requests)
        refused = await run_claude(binary, ("-p", "say hi"), env, workdir, timeout_s=60)
        assert refused.result is None or refused.result.get("is_error"), refused.describe()
        assert "revoked" in refused.stdout + refused.stderr, refused.describe()  # the gateway's message
        assert len(stack.emulator.requests) == before  # refused at the gateway, nothing went upstream
