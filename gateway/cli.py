"""Command line: ``switchyard serve | emulate | demo``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

import orjson

from gateway.config import ConfigError, Settings
from gateway.logging_setup import configure_logging

log = logging.getLogger("switchyard")


def _settings() -> Settings:
    """The one place the process environment is read."""
    return Settings.from_environ(os.environ)


def cmd_serve(args: argparse.Namespace) -> int:
    from gateway.service import serve

    settings = _settings()
    if args.host is not None or args.port is not None:
        settings = settings.model_copy(
            update={k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
        )
    settings.require_startable()
    configure_logging(settings.log_level)
    log.info("configuration %s", orjson.dumps(settings.public_summary()).decode())
    serve(settings)
    return 0


def cmd_emulate(args: argparse.Namespace) -> int:
    from gateway.emulator import EmulatorConfig, serve

    configure_logging("INFO")
    keys = frozenset(k for k in (args.api_key or []) if k)
    config = EmulatorConfig(api_keys=keys) if keys else EmulatorConfig()
    serve(config, args.host, args.port, provider=args.provider)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from gateway.demo import run_demo

    return run_demo(turns=args.turns, provider=args.provider)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="switchyard", description="Anthropic Messages API gateway with cache-aware prompting."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the gateway (configured by environment variables)")
    serve.add_argument("--host", default=None, help="overrides GATEWAY_HOST")
    serve.add_argument("--port", type=int, default=None, help="overrides GATEWAY_PORT")
    serve.set_defaults(func=cmd_serve)

    emulate = sub.add_parser("emulate", help="run an upstream emulator (for tests and demos)")
    emulate.add_argument(
        "--provider", default="anthropic", choices=["anthropic", "bedrock", "vertex", "foundry"]
    )
    emulate.add_argument("--host", default="127.0.0.1")
    emulate.add_argument("--port", type=int, default=8090)
    emulate.add_argument("--api-key", action="append", help="a key the emulator accepts (repeatable)")
    emulate.set_defaults(func=cmd_emulate)

    agent = sub.add_parser(
        "agent",
        add_help=False,
        help="run a headless agent with the built-in tools (switchyard agent --help)",
    )
    agent.add_argument("argv", nargs=argparse.REMAINDER)  # handled in main() by loop.cli

    demo = sub.add_parser("demo", help="run the gateway against the emulator and drive a conversation")
    demo.add_argument("--turns", type=int, default=4, help="conversation turns to drive")
    demo.add_argument(
        "--provider",
        default="anthropic",
        choices=["anthropic", "bedrock", "vertex", "foundry"],
        help="which upstream the gateway is configured for (each against its emulator)",
    )
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["agent"]:  # the agent front end parses its own options (loop.cli)
        from loop.cli import main as agent_main

        return agent_main(arguments[1:])
    args = build_parser().parse_args(arguments)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"switchyard: configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
