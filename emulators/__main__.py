"""``python -m emulators``: one provider's emulator as a process (options in :mod:`.standalone`).

Run from the repository root (the emulators are not part of the installed ``switchyard`` wheel).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from .providers import APP_FACTORIES
from .standalone import PROG, EmulateError, EmulateOptions, run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m emulators",
        description=(
            "Run one provider's emulator. Once listening it prints the credentials it accepts and "
            "an `export ...` line: the environment of a gateway using it as its upstream."
        ),
    )
    parser.add_argument("--provider", default="anthropic", choices=list(APP_FACTORIES))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090, help="0 picks a free port (printed)")
    parser.add_argument(
        "--api-key",
        action="append",
        help="replaces the accepted keys (repeatable): first-party keys, Foundry keys, Bedrock API "
        "keys (Bearer), Vertex static access tokens",
    )
    parser.add_argument(
        "--chunk-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="delay before each streamed content delta",
    )
    parser.add_argument(
        "--tls",
        type=Path,
        metavar="DIR",
        help="serve HTTPS; DIR gets ca.pem (trust this), cert.pem, key.pem (reused while valid)",
    )
    parser.add_argument("--aws-access-key-id", help="Bedrock: the SigV4 access key id accepted")
    parser.add_argument("--aws-secret-access-key", help="Bedrock: its secret access key")
    parser.add_argument("--aws-region", default="us-east-1", help="Bedrock: the SigV4 signing region")
    parser.add_argument(
        "--vertex-service-account",
        type=Path,
        metavar="FILE",
        help="Vertex: register FILE's service account (generated into FILE if it does not exist)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    options = EmulateOptions(
        provider=args.provider,
        host=args.host,
        port=args.port,
        api_keys=tuple(args.api_key or ()),
        chunk_delay_s=args.chunk_delay,
        tls_dir=args.tls,
        aws_access_key_id=args.aws_access_key_id,
        aws_secret_access_key=args.aws_secret_access_key,
        aws_region=args.aws_region,
        vertex_service_account=args.vertex_service_account,
    )
    try:
        run(options)
    except EmulateError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the listener could not bind
        print(
            f"{PROG}: error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr
        )
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
