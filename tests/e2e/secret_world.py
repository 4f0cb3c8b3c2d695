"""The world of ``test_secret_hygiene``: a fresh random secret for every credential variable the
gateway reads, the upstreams that accept them (the four emulators, recording every request), squid
with proxy authentication, a password-protected redis-server, and the gateway configurations that
use them: good ones (one per provider and credential kind) and their malformed variants."""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from emulators import EmulatorConfig, RunningEmulator, run_emulator
from emulators.bedrock_config import BedrockOptions
from tests.providers.bedrock_harness import serve_bedrock_emulator
from tests.support.redis_server import RedisServer, redis_binary
from tests.support.squid import USER as PROXY_USER
from tests.support.squid import Squid, run_squid
from tests.support.threaded import LoopThread
from tests.support.tls import make_pki

MODEL = "claude-sonnet-4-6"
VERTEX_PROJECT = "hygiene-project"
VERTEX_REGION = "us-east5"
VERTEX_ACCOUNT = f"gateway@{VERTEX_PROJECT}.iam.gserviceaccount.com"
ACCESS_KEY_ID = "AKIAHYGIENETEST00001"
SESSION = "hygiene-session"
START_TIMEOUT_S = 120.0


def _secret(name: str) -> str:
    return f"{name.lower().replace('_', '')[:10]}{secrets.token_hex(12)}"


def _pem_lines(pem: str) -> set[str]:
    """The lines of a PEM block's body that are long enough to identify it."""
    return {line.strip() for line in pem.splitlines() if len(line.strip()) >= 20 and "-----" not in line}


def _basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


# -- the world: emulators, squid, redis -------------------------------------------------------------


@dataclass
class World:
    directory: Path
    secrets: dict[str, str]
    forms: dict[str, set[str]]  # variable -> every form of its secret that must not leak
    anthropic: RunningEmulator
    bedrock: RunningEmulator
    vertex: RunningEmulator
    foundry: RunningEmulator
    squid: Squid
    redis_port: int
    key_file: Path
    client_cert: Path
    client_key: Path
    vertex_key_file: Path

    @property
    def emulators(self) -> list[RunningEmulator]:
        return [self.anthropic, self.bedrock, self.vertex, self.foundry]


VARIABLES = (
    "GATEWAY_API_KEYS",
    "GATEWAY_METRICS_API_KEYS",
    "GATEWAY_API_KEYS_FILE",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "GATEWAY_SESSION_STORE",
    "GATEWAY_CLIENT_KEY",
    "AWS_BEARER_TOKEN_BEDROCK",
    "ANTHROPIC_BEDROCK_BASE_URL",
    "GATEWAY_BEDROCK_CONTROL_URL",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "ANTHROPIC_VERTEX_BASE_URL",
    "ANTHROPIC_FOUNDRY_API_KEY",
    "ANTHROPIC_FOUNDRY_BASE_URL",
    # the fleet front door (sign-in, telemetry forwarding)
    "GATEWAY_OIDC_ISSUER",
    "GATEWAY_OIDC_CLIENT_SECRET",
    "GATEWAY_OIDC_CLIENT_SECRET_FILE",
    "GATEWAY_TOKEN_SIGNING_KEYS_FILE",
    "GATEWAY_OTLP_FORWARD_HEADERS",
)
URL_VARIABLES = {
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_BEDROCK_BASE_URL",
    "GATEWAY_BEDROCK_CONTROL_URL",
    "ANTHROPIC_VERTEX_BASE_URL",
    "ANTHROPIC_FOUNDRY_BASE_URL",
}
# the upstream request headers a secret is meant for (anywhere else upstream it is a leak)
SENT_AS = {
    "ANTHROPIC_API_KEY": {"x-api-key"},
    "ANTHROPIC_AUTH_TOKEN": {"authorization"},
    "AWS_BEARER_TOKEN_BEDROCK": {"authorization"},
    "AWS_SESSION_TOKEN": {"x-amz-security-token"},
    "ANTHROPIC_FOUNDRY_API_KEY": {"x-api-key", "api-key"},
}


@contextlib.contextmanager
def built_world(directory: Path) -> Iterator[World]:
    """Every secret, upstream and file of the world, in ``directory``; all stopped afterwards."""
    values = {name: _secret(name) for name in VARIABLES}
    forms = {name: {value} for name, value in values.items()}
    for name in (*URL_VARIABLES, "GATEWAY_OIDC_ISSUER"):
        forms[name].add(_basic("user", values[name]))
    key_file = directory / "api-keys"
    key_file.write_text(f"# team keys\n{values['GATEWAY_API_KEYS_FILE']} filed-team\n")
    (directory / "oidc-client-secret").write_text(values["GATEWAY_OIDC_CLIENT_SECRET_FILE"] + "\n")
    (directory / "token-signing-keys").write_text(f"k1 {values['GATEWAY_TOKEN_SIGNING_KEYS_FILE']}\n")
    (directory / "pki").mkdir()
    pki = make_pki(directory / "pki")
    forms["GATEWAY_CLIENT_KEY"] = _pem_lines(pki.client_key.read_text())
    account_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private_pem = account_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    forms["GOOGLE_APPLICATION_CREDENTIALS"] = _pem_lines(private_pem)
    public_pem = (
        account_key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    redis = RedisServer(redis_binary(), password=values["GATEWAY_SESSION_STORE"], directory=directory)
    redis.start()
    redis_port = redis.port
    loop = LoopThread()
    try:
        anthropic = loop.enter(
            run_emulator(
                EmulatorConfig(
                    api_keys=frozenset({values["ANTHROPIC_API_KEY"], values["ANTHROPIC_AUTH_TOKEN"]})
                )
            )
        )
        bedrock = loop.enter(
            serve_bedrock_emulator(
                options=BedrockOptions(
                    credentials={ACCESS_KEY_ID: values["AWS_SECRET_ACCESS_KEY"]},
                    api_keys=frozenset({values["AWS_BEARER_TOKEN_BEDROCK"]}),
                )
            )
        )
        vertex = loop.enter(
            run_emulator(
                EmulatorConfig(
                    vertex_projects=frozenset({VERTEX_PROJECT}),
                    vertex_locations=frozenset({VERTEX_REGION}),
                    vertex_tokens=frozenset(),
                    vertex_service_accounts={VERTEX_ACCOUNT: public_pem},
                ),
                provider="vertex",
            )
        )
        foundry = loop.enter(
            run_emulator(
                EmulatorConfig(foundry_api_keys=frozenset({values["ANTHROPIC_FOUNDRY_API_KEY"]})),
                provider="foundry",
            )
        )
        squid = loop.enter(run_squid(allowed_ports=[anthropic.port]))
        values["HTTPS_PROXY"] = values["HTTP_PROXY"] = squid.password  # one squid, one password
        forms["HTTPS_PROXY"] = forms["HTTP_PROXY"] = {squid.password, _basic(PROXY_USER, squid.password)}
        vertex_key_file = directory / "service-account.json"
        vertex_key_file.write_text(
            json.dumps(
                {
                    "type": "service_account",
                    "project_id": VERTEX_PROJECT,
                    "private_key_id": "0000000000000000",
                    "private_key": private_pem,
                    "client_email": VERTEX_ACCOUNT,
                    "client_id": "100000000000000000001",
                    "token_uri": vertex.base_url + "/token",
                }
            )
        )
        yield World(
            directory,
            values,
            forms,
            anthropic,
            bedrock,
            vertex,
            foundry,
            squid,
            redis_port,
            key_file,
            pki.client_cert,
            pki.client_key,
            vertex_key_file,
        )
    finally:
        loop.close()
        redis.stop()


# -- configurations ---------------------------------------------------------------------------------


def _userinfo(url: str, password: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://user:{password}@{rest}"


def _common(w: World) -> dict[str, str]:
    s = w.secrets
    return {
        "GATEWAY_API_KEYS": s["GATEWAY_API_KEYS"],
        "GATEWAY_METRICS_API_KEYS": s["GATEWAY_METRICS_API_KEYS"],
        "GATEWAY_API_KEYS_FILE": str(w.key_file),
        "GATEWAY_MAX_RETRIES": "0",
        "GATEWAY_DRAIN_TIMEOUT_S": "2",
    }


def _aws_files(w: World) -> dict[str, str]:
    for name in ("aws-config", "aws-credentials"):
        (w.directory / name).touch()
    return {
        "AWS_CONFIG_FILE": str(w.directory / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(w.directory / "aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_REGION": "us-east-1",
        "GATEWAY_PROVIDER": "bedrock",
    }


def anthropic_key(w: World) -> dict[str, str]:
    s = w.secrets
    return {
        **_common(w),
        "ANTHROPIC_API_KEY": s["ANTHROPIC_API_KEY"],
        "ANTHROPIC_BASE_URL": _userinfo(w.anthropic.base_url, s["ANTHROPIC_BASE_URL"]),
        "HTTP_PROXY": w.squid.url(),
        "HTTPS_PROXY": w.squid.url(),
        "GATEWAY_SESSION_STORE": f"redis://:{s['GATEWAY_SESSION_STORE']}@127.0.0.1:{w.redis_port}/0",
        "GATEWAY_CLIENT_CERT": str(w.client_cert),
        "GATEWAY_CLIENT_KEY": str(w.client_key),
    }


def anthropic_token(w: World) -> dict[str, str]:
    s = w.secrets
    return {
        **_common(w),
        "ANTHROPIC_AUTH_TOKEN": s["ANTHROPIC_AUTH_TOKEN"],
        "ANTHROPIC_BASE_URL": _userinfo(w.anthropic.base_url, s["ANTHROPIC_BASE_URL"]),
    }


def bedrock_bearer(w: World) -> dict[str, str]:
    s = w.secrets
    return {
        **_common(w),
        **_aws_files(w),
        "AWS_BEARER_TOKEN_BEDROCK": s["AWS_BEARER_TOKEN_BEDROCK"],
        "ANTHROPIC_BEDROCK_BASE_URL": _userinfo(w.bedrock.base_url, s["ANTHROPIC_BEDROCK_BASE_URL"]),
    }


def bedrock_sigv4(w: World) -> dict[str, str]:
    s = w.secrets
    return {
        **_common(w),
        **_aws_files(w),
        "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": s["AWS_SECRET_ACCESS_KEY"],
        "AWS_SESSION_TOKEN": s["AWS_SESSION_TOKEN"],
        "ANTHROPIC_BEDROCK_BASE_URL": _userinfo(w.bedrock.base_url, s["ANTHROPIC_BEDROCK_BASE_URL"]),
        "GATEWAY_BEDROCK_CONTROL_URL": _userinfo(w.bedrock.base_url, s["GATEWAY_BEDROCK_CONTROL_URL"]),
        "GATEWAY_MODEL_DISCOVERY": "1",
        "GATEWAY_MODEL_DISCOVERY_INTERVAL_S": "0",
    }


def vertex(w: World) -> dict[str, str]:
    s = w.secrets
    return {
        **_common(w),
        "GATEWAY_PROVIDER": "vertex",
        "CLOUD_ML_REGION": VERTEX_REGION,
        "ANTHROPIC_VERTEX_PROJECT_ID": VERTEX_PROJECT,
        "ANTHROPIC_VERTEX_BASE_URL": _userinfo(w.vertex.base_url + "/v1", s["ANTHROPIC_VERTEX_BASE_URL"]),
        "GOOGLE_APPLICATION_CREDENTIALS": str(w.vertex_key_file),
    }


def foundry(w: World) -> dict[str, str]:
    s = w.secrets
    return {
        **_common(w),
        "GATEWAY_PROVIDER": "foundry",
        "ANTHROPIC_FOUNDRY_API_KEY": s["ANTHROPIC_FOUNDRY_API_KEY"],
        "ANTHROPIC_FOUNDRY_BASE_URL": _userinfo(
            w.foundry.base_url + "/anthropic", s["ANTHROPIC_FOUNDRY_BASE_URL"]
        ),
    }


def _fleet_signin(w: World) -> dict[str, str]:
    """Sign-in on (the IdP is only contacted at the first sign-in: its host need not exist)."""
    return {
        **_common(w),
        "ANTHROPIC_API_KEY": w.secrets["ANTHROPIC_API_KEY"],
        "ANTHROPIC_BASE_URL": _userinfo(w.anthropic.base_url, w.secrets["ANTHROPIC_BASE_URL"]),
        "GATEWAY_PUBLIC_URL": "https://claude-gw.hygiene.example",
        "GATEWAY_OIDC_CLIENT_ID": "switchyard-hygiene",
    }


def fleet(w: World) -> dict[str, str]:
    """Sign-in with the client secret and signing keys in files, state in the password-protected
    Redis, telemetry forwarded with a bearer header; the issuer URL carries userinfo."""
    s = w.secrets
    return {
        **_fleet_signin(w),
        "GATEWAY_OIDC_ISSUER": _userinfo("https://idp.hygiene.example/realms/eng", s["GATEWAY_OIDC_ISSUER"]),
        "GATEWAY_OIDC_CLIENT_SECRET_FILE": str(w.directory / "oidc-client-secret"),
        "GATEWAY_TOKEN_SIGNING_KEYS_FILE": str(w.directory / "token-signing-keys"),
        "GATEWAY_SESSION_STORE": f"redis://:{s['GATEWAY_SESSION_STORE']}@127.0.0.1:{w.redis_port}/0",
        "GATEWAY_OTLP_FORWARD_URLS": "https://collector.hygiene.example:4318",
        "GATEWAY_OTLP_FORWARD_HEADERS": f"Authorization=Bearer%20{s['GATEWAY_OTLP_FORWARD_HEADERS']}",
    }


def fleet_inline_secret(w: World) -> dict[str, str]:
    return {
        **_fleet_signin(w),
        "GATEWAY_OIDC_ISSUER": "https://idp.hygiene.example/realms/eng",
        "GATEWAY_OIDC_CLIENT_SECRET": w.secrets["GATEWAY_OIDC_CLIENT_SECRET"],
    }


GOOD: dict[str, Callable[[World], dict[str, str]]] = {
    "anthropic-key": anthropic_key,
    "anthropic-token": anthropic_token,
    "bedrock-bearer": bedrock_bearer,
    "bedrock-sigv4": bedrock_sigv4,
    "vertex": vertex,
    "foundry": foundry,
    "fleet": fleet,
    "fleet-inline-secret": fleet_inline_secret,
}


def _not_a_key(w: World, name: str, secret: str) -> Path:
    path = w.directory / name
    path.write_text(f"-----BEGIN PRIVATE KEY-----\n{secret}\n-----END PRIVATE KEY-----\n")
    return path


def malformed(w: World, env: dict[str, str]) -> tuple[dict[str, str], set[str]]:
    """``env`` with each of its credential variables malformed around its secret; the variables
    expected in the error lines."""
    s = w.secrets
    bad_keys = w.directory / "bad-api-keys"
    bad_keys.write_text(f"{s['GATEWAY_API_KEYS_FILE']} filed-team role=root\n")  # an unknown role
    broken = {
        "GATEWAY_API_KEYS": f"{s['GATEWAY_API_KEYS']}\tx",
        "GATEWAY_METRICS_API_KEYS": f"{s['GATEWAY_METRICS_API_KEYS']}\u00e9",
        "GATEWAY_API_KEYS_FILE": str(bad_keys),
        "ANTHROPIC_API_KEY": f"{s['ANTHROPIC_API_KEY']}\n",
        "ANTHROPIC_AUTH_TOKEN": f"Bearer {s['ANTHROPIC_AUTH_TOKEN']}",
        "ANTHROPIC_BASE_URL": f"https://user:{s['ANTHROPIC_BASE_URL']}@api.example:99999",
        "HTTPS_PROXY": f"socks5://{PROXY_USER}:{s['HTTPS_PROXY']}@proxy.example:1080",
        "HTTP_PROXY": f"http://{PROXY_USER}:{s['HTTP_PROXY']}@proxy.example:31280x",
        "GATEWAY_SESSION_STORE": f"redis://:{s['GATEWAY_SESSION_STORE']}@127.0.0.1:63x79/0",
        "GATEWAY_CLIENT_KEY": str(_not_a_key(w, "not-a-key.pem", s["GATEWAY_CLIENT_KEY"])),
        "AWS_BEARER_TOKEN_BEDROCK": f"{s['AWS_BEARER_TOKEN_BEDROCK']}\r",
        "ANTHROPIC_BEDROCK_BASE_URL": f"ftp://user:{s['ANTHROPIC_BEDROCK_BASE_URL']}@bedrock.example",
        "GATEWAY_BEDROCK_CONTROL_URL": f"https://user:{s['GATEWAY_BEDROCK_CONTROL_URL']}@[::1",
        "ANTHROPIC_VERTEX_BASE_URL": f"https://user:{s['ANTHROPIC_VERTEX_BASE_URL']}@vertex.example:0x1/v1",
        "ANTHROPIC_FOUNDRY_API_KEY": f"{s['ANTHROPIC_FOUNDRY_API_KEY']}\x7f",
        "ANTHROPIC_FOUNDRY_BASE_URL": f"https://user:{s['ANTHROPIC_FOUNDRY_BASE_URL']}@f.example:99999/x",
        "GATEWAY_OIDC_ISSUER": f"https://user:{s['GATEWAY_OIDC_ISSUER']}@idp.example:99999/realms/eng",
        "GATEWAY_OTLP_FORWARD_HEADERS": f"Authorization Bearer {s['GATEWAY_OTLP_FORWARD_HEADERS']}",
    }
    changed = {name: value for name, value in broken.items() if name in env}
    # the keys file is read only once the key variables are good: it has a configuration of its own
    return {**env, **changed}, set(changed) - {"GATEWAY_API_KEYS_FILE"}
