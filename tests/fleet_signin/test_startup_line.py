"""A real ``python -m gateway serve`` with the whole fleet front door configured (sign-in against an
IdP with a client secret file, signing keys file, policy file, counters and sign-in state in a
password-protected redis-server, OTLP forwarding with a bearer header): its start-up output says
what is on in one ``configuration`` line, and no secret appears anywhere in it.

The IdP is not contacted at start-up (discovery is fetched at the first sign-in), so its issuer
needs no server here.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.redis_server import running_redis
from tests.support.serve_process import serve_process

CLIENT_SECRET = "idp-client-secret-in-a-file-93d1"
SIGNING_SECRET = "token-signing-secret-of-40-characters-7c2a"
COLLECTOR_TOKEN = "collector-bearer-5e8b"
REDIS_PASSWORD = "f00dfacecafe0123"
INBOUND_KEY = "sk-gw-inbound-0a4c"
UPSTREAM_KEY = "sk-ant-upstream-1b7e"
POLICY = "base: {models: {deny: [opus]}}\ngroups: [{group: eng}, {group: ops}]\n"


def test_serve_logs_the_fleet_in_its_configuration_line_and_no_secret(tmp_path: Path) -> None:
    (tmp_path / "client-secret").write_text(CLIENT_SECRET + "\n")
    (tmp_path / "signing-keys").write_text(f"k1 {SIGNING_SECRET}\n")
    (tmp_path / "policy.yaml").write_text(POLICY)
    with running_redis(password=REDIS_PASSWORD) as redis:
        env = {
            "GATEWAY_API_KEYS": INBOUND_KEY,
            "ANTHROPIC_API_KEY": UPSTREAM_KEY,
            "GATEWAY_LOG_LEVEL": "INFO",
            "GATEWAY_PUBLIC_URL": "https://claude-gw.corp.example",
            "GATEWAY_OIDC_ISSUER": "https://login.corp.example/realms/eng",
            "GATEWAY_OIDC_CLIENT_ID": "switchyard",
            "GATEWAY_OIDC_CLIENT_SECRET_FILE": str(tmp_path / "client-secret"),
            "GATEWAY_TOKEN_SIGNING_KEYS_FILE": str(tmp_path / "signing-keys"),
            "GATEWAY_POLICY_FILE": str(tmp_path / "policy.yaml"),
            "GATEWAY_SESSION_STORE": redis.url,
            "GATEWAY_OTLP_FORWARD_URLS": "https://otel.corp.example:4318",
            "GATEWAY_OTLP_FORWARD_HEADERS": f"Authorization=Bearer%20{COLLECTOR_TOKEN}",
        }
        with serve_process(env, tmp_path / "stderr") as gateway:
            status, _ = gateway.get("/healthz")
            assert status == 200
            output = gateway.stderr()
    messages = [json.loads(line)["message"] for line in output.splitlines() if line.startswith("{")]
    lines = [message for message in messages if message.startswith("configuration {")]
    assert len(lines) == 1 and "\n" not in lines[0], output[-3000:]
    summary = json.loads(lines[0].removeprefix("configuration "))
    assert summary["signin"]["issuer"] == "https://login.corp.example/realms/eng"
    assert summary["signin"]["store"] == "redis"
    assert summary["signin"]["client_secret"].startswith("GATEWAY_OIDC_CLIENT_SECRET_FILE (")
    assert summary["policy"]["rules"] == {"mode": "layered", "groups": 2, "users": 0}
    assert summary["policy"]["counters"] == "redis"
    assert summary["otlp_forward"] == ["otel.corp.example:4318"]
    assert summary["session_store"] == redis.url.replace(f":{REDIS_PASSWORD}@", "")
    for secret in (CLIENT_SECRET, SIGNING_SECRET, COLLECTOR_TOKEN, REDIS_PASSWORD, INBOUND_KEY, UPSTREAM_KEY):
        assert secret not in output, secret
