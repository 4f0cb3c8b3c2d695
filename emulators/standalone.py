"""``python -m emulators``: one provider's emulator as a process, and how to point a client at it.

Once it listens it prints (stdout, flushed) three kinds of lines::

    emulators: bedrock emulator on https://127.0.0.1:8090
    credentials: SigV4 access key AKIDEXAMPLE secret wJalr... region us-east-1; Bedrock API key ...
    trust: /tmp/emu-tls/ca.pem (CA of the emulator's certificate)          [with --tls]
    export GATEWAY_PROVIDER=bedrock ANTHROPIC_BEDROCK_BASE_URL=https://... AWS_REGION=... ...

The ``export`` line (shell-quoted) is the environment of a gateway using the emulator as its
upstream. Credentials (defaults in :mod:`.config` and :mod:`.bedrock_config`, all replaceable):

* ``--api-key K`` (repeatable) replaces the accepted keys of the provider: first-party
  ``x-api-key``/Bearer keys, Foundry ``api-key``/``x-api-key`` keys, Bedrock API keys
  (``Authorization: Bearer``, the gateway's ``AWS_BEARER_TOKEN_BEDROCK``) or Vertex static
  access tokens;
* Bedrock SigV4: ``--aws-access-key-id`` / ``--aws-secret-access-key`` replace the long-term key
  pair, ``--aws-region`` the signing region;
* Vertex: ``--vertex-service-account FILE`` registers FILE's account with the token endpoint, or
  generates an account into FILE when it does not exist; a key file whose ``token_uri`` is on a
  loopback host is pointed at this emulator. Without the option an account is generated into a
  temporary directory removed at exit, so the printed environment works as is.

``--tls DIR`` serves HTTPS with a certificate from :mod:`.tls`; ``--chunk-delay S`` waits S seconds
(on the emulator's clock) before each content delta of a stream.
"""

from __future__ import annotations

import ipaddress
import shlex
import socket
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final, TextIO
from urllib.parse import urlsplit

from aiohttp import web

from . import service_accounts
from .bedrock_config import DEFAULT_ACCESS_KEY_ID, DEFAULT_REGION, DEFAULT_SECRET_ACCESS_KEY, BedrockOptions
from .config import DEFAULT_API_KEY, DEFAULT_FOUNDRY_KEY, EmulatorConfig
from .providers import APP_FACTORIES, app_factory
from .runner import RunningEmulator, serve
from .service_accounts import ServiceAccount
from .state import get_state
from .tls import ServerCertificate, server_certificate

VERTEX_PROJECT: Final = "switchyard-emulator"
VERTEX_REGION: Final = "us-east5"
VERTEX_ACCOUNT: Final = f"gateway@{VERTEX_PROJECT}.iam.gserviceaccount.com"
PLACEHOLDER_TOKEN_URI: Final = "http://127.0.0.1/token"  # replaced once the port is known
LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1"})
PROG: Final = "emulators"  # the prefix of the printed lines and error messages


class EmulateError(Exception):
    """A bad ``python -m emulators`` option (the message says which)."""


@dataclass(frozen=True)
class EmulateOptions:
    provider: str = "anthropic"
    host: str = "127.0.0.1"
    port: int = 8090
    api_keys: tuple[str, ...] = ()
    chunk_delay_s: float = 0.0
    tls_dir: Path | None = None
    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = None
    aws_region: str = DEFAULT_REGION
    vertex_service_account: Path | None = None


@dataclass
class Prepared:
    """An emulator app ready to serve, and what a client needs to use it."""

    options: EmulateOptions
    app: web.Application
    certificate: ServerCertificate | None = None
    account: ServiceAccount | None = None
    account_path: Path | None = None
    notes: list[str] = field(default_factory=list)


def _loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def certificate_hosts(host: str) -> list[str]:
    """Names the certificate must carry: loopback always, plus the listen host (or this machine's
    name when listening on every address)."""
    hosts = ["localhost", "127.0.0.1", "::1"]
    if host in ("0.0.0.0", "::", ""):
        hosts.append(socket.gethostname())
    else:
        hosts.append(host)
    return hosts


def _vertex_account(options: EmulateOptions, workdir: Path) -> tuple[ServiceAccount, Path]:
    path = options.vertex_service_account or workdir / "vertex-service-account.json"
    if path.exists():
        try:
            return service_accounts.load(path), path
        except ValueError as exc:
            raise EmulateError(f"--vertex-service-account: {exc}") from None
    return service_accounts.generate(VERTEX_PROJECT, VERTEX_ACCOUNT, PLACEHOLDER_TOKEN_URI), path


def prepare(options: EmulateOptions, workdir: Path) -> Prepared:
    """Build the app (credentials registered) and, with ``tls_dir``, the certificate."""
    if options.provider not in APP_FACTORIES:
        raise EmulateError(f"--provider: unknown provider {options.provider!r}")
    if options.chunk_delay_s < 0:
        raise EmulateError("--chunk-delay: must be >= 0")
    if (options.aws_access_key_id is None) != (options.aws_secret_access_key is None):
        raise EmulateError("--aws-access-key-id and --aws-secret-access-key go together")
    keys = frozenset(key for key in options.api_keys if key)
    config = EmulatorConfig(chunk_delay_s=options.chunk_delay_s)
    account = account_path = None
    if options.provider == "anthropic" and keys:
        config = replace(config, api_keys=keys)
    elif options.provider == "foundry" and keys:
        config = replace(config, foundry_api_keys=keys)
    elif options.provider == "vertex":
        account, account_path = _vertex_account(options, workdir)
        config = replace(
            config,
            vertex_tokens=keys or config.vertex_tokens,
            vertex_service_accounts={account.email: account.public_key_pem},
        )
    if options.provider == "bedrock":
        from .bedrock import create_app as bedrock_app

        bedrock = BedrockOptions(region=options.aws_region)
        if keys:
            bedrock = replace(bedrock, api_keys=keys)
        if options.aws_access_key_id and options.aws_secret_access_key:
            bedrock = replace(bedrock, credentials={options.aws_access_key_id: options.aws_secret_access_key})
        app = bedrock_app(config, bedrock)
    else:
        app = app_factory(options.provider)(config)
    certificate = None
    if options.tls_dir is not None:
        try:
            certificate = server_certificate(options.tls_dir, certificate_hosts(options.host))
        except OSError as exc:
            raise EmulateError(
                f"--tls: cannot write the certificate in {options.tls_dir}: {exc.strerror}"
            ) from None
    return Prepared(options, app, certificate, account, account_path)


def _bedrock_credentials(prepared: Prepared) -> BedrockOptions:
    from .bedrock_config import get_bedrock_state

    return get_bedrock_state(prepared.app).options


def client_env(prepared: Prepared, base_url: str) -> dict[str, str]:
    """The environment of a gateway whose upstream is this emulator."""
    options = prepared.options
    provider = options.provider
    keys = [key for key in options.api_keys if key]
    env: dict[str, str] = {"GATEWAY_PROVIDER": provider}
    if provider == "anthropic":
        env |= {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": keys[0] if keys else DEFAULT_API_KEY}
    elif provider == "foundry":
        env |= {
            "ANTHROPIC_FOUNDRY_BASE_URL": base_url + "/anthropic",
            "ANTHROPIC_FOUNDRY_API_KEY": keys[0] if keys else DEFAULT_FOUNDRY_KEY,
        }
    elif provider == "bedrock":
        env |= {"ANTHROPIC_BEDROCK_BASE_URL": base_url, "AWS_REGION": options.aws_region}
        if keys and options.aws_access_key_id is None:  # API keys given: that is what to use
            env["AWS_BEARER_TOKEN_BEDROCK"] = keys[0]
        else:
            env |= {
                "AWS_ACCESS_KEY_ID": options.aws_access_key_id or DEFAULT_ACCESS_KEY_ID,
                "AWS_SECRET_ACCESS_KEY": options.aws_secret_access_key or DEFAULT_SECRET_ACCESS_KEY,
            }
    elif provider == "vertex" and prepared.account is not None:
        project = prepared.account.info.get("project_id") or VERTEX_PROJECT
        env |= {
            "ANTHROPIC_VERTEX_BASE_URL": base_url + "/v1",
            "CLOUD_ML_REGION": VERTEX_REGION,
            "ANTHROPIC_VERTEX_PROJECT_ID": str(project),
            "GOOGLE_APPLICATION_CREDENTIALS": str(prepared.account_path),
        }
    if prepared.certificate is not None:
        env |= {
            "GATEWAY_CA_BUNDLE": str(prepared.certificate.ca),
            "NODE_EXTRA_CA_CERTS": str(prepared.certificate.ca),
        }
    return env


def credentials_line(prepared: Prepared) -> str:
    """What the emulator accepts (these are test credentials: printing them is the point)."""
    provider = prepared.options.provider
    config = get_state(prepared.app).config
    if provider == "anthropic":
        return "credentials: API keys (x-api-key or Bearer) " + ", ".join(sorted(config.api_keys))
    if provider == "foundry":
        return "credentials: Foundry keys (api-key or x-api-key) " + ", ".join(
            sorted(config.foundry_api_keys)
        )
    if provider == "vertex":
        account = prepared.account.email if prepared.account else "none"
        return (
            f"credentials: service account {account} (key file {prepared.account_path}); "
            "static access tokens " + ", ".join(sorted(config.vertex_tokens))
        )
    bedrock = _bedrock_credentials(prepared)
    pairs = ", ".join(f"{key_id} / {secret}" for key_id, secret in sorted(bedrock.credentials.items()))
    return (
        f"credentials: SigV4 access key / secret {pairs} (region {bedrock.region}); "
        "Bedrock API keys (Bearer) " + ", ".join(sorted(bedrock.api_keys))
    )


def export_line(env: dict[str, str]) -> str:
    return "export " + " ".join(f"{name}={shlex.quote(value)}" for name, value in env.items())


def _point_account_here(prepared: Prepared, base_url: str) -> None:
    if prepared.account is None or prepared.account_path is None:
        return
    token_uri = prepared.account.info.get("token_uri")
    ours = base_url + "/token"
    host = urlsplit(token_uri).hostname if isinstance(token_uri, str) else None
    if not prepared.account_path.exists() or (host is not None and _loopback(host)):
        prepared.account.write(prepared.account_path, token_uri=ours)
    elif token_uri != ours:
        prepared.notes.append(
            f"note: {prepared.account_path} sends google-auth to {token_uri}, not to {ours}: "
            "give --vertex-service-account a new path to generate an account for this emulator"
        )


def announce(prepared: Prepared, emulator: RunningEmulator, out: TextIO) -> None:
    """Print the listening, credentials, trust and ``export`` lines."""
    _point_account_here(prepared, emulator.base_url)
    lines = [f"{PROG}: {prepared.options.provider} emulator on {emulator.base_url}"]
    lines.append(credentials_line(prepared))
    if prepared.certificate is not None:
        lines.append(f"trust: {prepared.certificate.ca} (CA of the emulator's certificate)")
    lines.extend(prepared.notes)
    lines.append(export_line(client_env(prepared, emulator.base_url)))
    out.write("\n".join(lines) + "\n")
    out.flush()


def run(options: EmulateOptions, out: TextIO = sys.stdout) -> None:
    """Serve until SIGINT/SIGTERM (generated files not asked for live in a temporary directory)."""
    with tempfile.TemporaryDirectory(prefix="switchyard-emulators-") as workdir:
        prepared = prepare(options, Path(workdir))

        def ready(emulator: RunningEmulator) -> None:
            announce(prepared, emulator, out)

        serve(
            None,
            options.host,
            options.port,
            on_ready=ready,
            provider=options.provider,
            ssl_context=prepared.certificate.context() if prepared.certificate else None,
            app=prepared.app,
        )
