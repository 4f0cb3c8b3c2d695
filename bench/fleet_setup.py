"""The sign-in + policy configuration the fleet-overhead bench (:mod:`bench.fleet_overhead`) runs.

:func:`prepare` writes, into a scratch directory, a token signing keys file
(``GATEWAY_TOKEN_SIGNING_KEYS_FILE``), a realistic policy file (``GATEWAY_POLICY_FILE``: a model allow
rule, a per-user daily spend cap, request-rate and concurrent-stream limits, a group pool, groups
with managed settings, two users with their own cap, an admin group; every limit far above what a
bench run can reach) and a file of access tokens, one per simulated user, minted with the gateway's
own :class:`~gateway.fleet.tokens.TokenSigner` from that same keys file, for the public URL the
gateway is given. ``GATEWAY_OIDC_ISSUER`` points at :class:`IdpSentinel`: a loopback socket that
listens but never answers, so the bench can tell whether the gateway ever tried to reach the IdP
(discovery is lazy: serving bearer tokens must not need it).
"""

from __future__ import annotations

import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gateway.config_values import optional_url
from gateway.fleet.signing_keys import parse_signing_keys
from gateway.fleet.tokens import Identity, TokenSigner

GROUP: Final = "engineering"
ADMIN_GROUP: Final = "platform-admins"
SUBGROUPS: Final = ("backend", "frontend", "data")  # each user is in engineering and one of these
LISTED_USERS: Final = 2  # user-000 and user-001 have an entry of their own (and their own cap row)
DENIED_MODEL: Final = "claude-opus-4-1"  # outside the allow rule: a 400 proves the policy is in force
TOKEN_TTL_S: Final = 6 * 3600

# every limit is far above what a bench run reaches (a refusal would fail the run loudly)
POLICY_TEMPLATE: Final = """\
# fleet-overhead bench policy: realistic shape, limits that never trip
version: 1
mode: layered
admin_groups: [{admin}]
organization:
  spend_caps: {{monthly_usd: 100000000}}
base:
  models:
    allow: [sonnet, haiku]
  spend_caps: {{daily_usd: 100000, monthly_usd: 1000000}}
  rate_limits: {{requests_per_minute: 100000000, concurrent_streams: 10000}}
groups:
  - group: {group}
    pool: {{daily_usd: 10000000}}
    managed_settings:
      env: {{CLAUDE_CODE_ENABLE_TELEMETRY: "1", OTEL_METRICS_EXPORTER: otlp}}
      permissions: {{deny: ["Bash(curl:*)", "Read(./.env)"]}}
  - group: backend
    managed_settings:
      permissions: {{allow: ["Bash(make test)"]}}
  - group: data
    rate_limits: {{tokens_per_minute: 1000000000}}
users:
{users}
"""


def policy_text(users: int) -> str:
    """The policy file: the first ``LISTED_USERS`` users get an entry (a higher daily cap) of their
    own, the first named by IdP subject, the others by e-mail (a policy file may do either)."""
    names = [user_subject(i) if i == 0 else user_email(i) for i in range(min(users, LISTED_USERS))]
    entries = "\n".join(f"  - user: {name}\n    spend_caps: {{daily_usd: 200000}}" for name in names)
    return POLICY_TEMPLATE.format(admin=ADMIN_GROUP, group=GROUP, users=entries or "  []")


def user_email(index: int) -> str:
    return f"user-{index:03d}@bench.example"


def user_subject(index: int) -> str:
    return f"idp-subject-{index:03d}"


def user_identity(index: int) -> Identity:
    return Identity(user_subject(index), user_email(index), (GROUP, SUBGROUPS[index % len(SUBGROUPS)]))


class IdpSentinel:
    """A loopback port that accepts TCP connections into its backlog and never answers: the
    ``GATEWAY_OIDC_ISSUER`` of the sign-in gateway. :meth:`contacted` says whether anything
    connected (the kernel completes the handshake into the backlog without an ``accept``)."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.setblocking(False)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def contacted(self) -> bool:
        try:
            conn, _ = self._sock.accept()
        except BlockingIOError:
            return False
        conn.close()
        return True

    def close(self) -> None:
        self._sock.close()


@dataclass(frozen=True)
class FleetConfig:
    """What the sign-in gateway is started with, and the bearers the load generator sends."""

    env: dict[str, str]  # GATEWAY_* variables of the sign-in + policy gateway
    tokens: list[str]  # one access token per simulated user, in rotation order
    tokens_file: Path  # the same, one per line (the load generator's --keys-file)
    admin_token: str  # a user in the policy's admin group (reads the admin API)
    users: list[str]  # e-mail of each simulated user, in the tokens' order
    policy_file: Path


def mint(keys_file: Path, public_url: str, identities: list[Identity]) -> list[str]:
    """Access tokens for ``identities``, signed as the gateway started with ``keys_file`` and
    ``GATEWAY_PUBLIC_URL=public_url`` signs them (same key, same issuer normalisation)."""
    issuer = optional_url(public_url)
    assert isinstance(issuer, str)
    signer = TokenSigner(parse_signing_keys(keys_file.read_text("utf-8")), issuer, TOKEN_TTL_S, time.time)
    return [signer.mint(identity, f"bench-family-{i}")[0] for i, identity in enumerate(identities)]


def prepare(scratch: Path, public_url: str, issuer_url: str, users: int) -> FleetConfig:
    """Write the keys, policy and tokens files into ``scratch``; the gateway's environment."""
    if users < 1:
        raise ValueError("at least one user")
    keys_file = scratch / "signing-keys"
    keys_file.write_text(
        f"# first key signs, every key verifies\nbench-2 {secrets.token_urlsafe(48)}\n"
        f"bench-1 {secrets.token_urlsafe(48)}\n",
        encoding="utf-8",
    )
    emails = [user_email(i) for i in range(users)]
    policy_file = scratch / "policy.yaml"
    policy_file.write_text(policy_text(users), encoding="utf-8")
    identities = [user_identity(i) for i in range(users)]
    admin = Identity("idp-subject-admin", "admin@bench.example", (ADMIN_GROUP,))
    *tokens, admin_token = mint(keys_file, public_url, [*identities, admin])
    tokens_file = scratch / "tokens"
    tokens_file.write_text("".join(f"{token}\n" for token in tokens), encoding="utf-8")
    env = {
        "GATEWAY_OIDC_ISSUER": issuer_url,
        "GATEWAY_OIDC_CLIENT_ID": "switchyard-bench",
        "GATEWAY_PUBLIC_URL": public_url,
        "GATEWAY_ALLOW_INSECURE_LOOPBACK": "1",
        "GATEWAY_TOKEN_SIGNING_KEYS_FILE": str(keys_file),
        "GATEWAY_POLICY_FILE": str(policy_file),
    }
    return FleetConfig(env, tokens, tokens_file, admin_token, emails, policy_file)
