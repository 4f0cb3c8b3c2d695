"""Command line: ``switchyard serve | agent`` (the emulators and the demo are repository tools:
``python -m emulators``, ``python -m bench.demo``)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import orjson

from gateway.config import ConfigError, Settings
from gateway.logging_setup import configure_logging

log = logging.getLogger("switchyard")


FLAG_VARIABLES = {"host": "GATEWAY_HOST", "port": "GATEWAY_PORT"}
"""``serve``'s flags and the variables they override (validated as those are)."""


@contextlib.contextmanager
def _naming(flags: Mapping[str, str]) -> Iterator[None]:
    """A configuration problem with a variable a flag gave (``flags``: variable -> flag) names
    the flag too: ``--port (GATEWAY_PORT): ...``."""
    try:
        yield
    except ConfigError as exc:
        lines = (
            next(
                (f"{flag} ({v}){line[len(v) :]}" for v, flag in flags.items() if line.startswith(f"{v}:")),
                line,
            )
            for line in exc.problems
        )
        raise ConfigError(*lines) from None


def cmd_serve(args: argparse.Namespace) -> int:
    environ = dict(os.environ)  # the one place the process environment is read
    flags = {FLAG_VARIABLES[f]: f"--{f}" for f in FLAG_VARIABLES if getattr(args, f) is not None}
    for variable, flag in flags.items():  # the flags take the place of their variables
        environ[variable] = str(getattr(args, flag[2:]))
    with _naming(flags):
        settings = Settings.from_environ(environ, serving=True)
        settings.require_startable()
        if settings.selection.upstreams_file is not None:  # several upstreams: validated before serving
            from gateway.upstreams.config import upstreams_of

            upstreams_of(settings)
        from gateway.process import check_listen, serve  # aiohttp: only once the settings are good

        check_listen(settings.listener.host, settings.listener.port)
    from gateway.startup_summary import public_summary

    configure_logging(settings.observability.log_level)
    summary = public_summary(settings)
    log.info("configuration %s", orjson.dumps(summary).decode())
    dropped = [*summary.get("url_credentials_ignored", ())]
    for entry in summary.get("upstreams", ()):
        dropped += [f"upstream {entry['name']}: {v}" for v in entry.get("url_credentials_ignored", ())]
    for variable in dropped:
        log.warning(
            "%s: the credentials in the URL (user:password@) are ignored: never sent upstream nor "
            "logged (the upstream credential comes from its own variables)",
            variable,
        )
    serve(settings)
    return 0


class _Parser(argparse.ArgumentParser):
    """An argument parser whose ``epilog`` may be a function, called only when help is printed
    (the variable reference of ``serve --help`` is long: not built on every start-up)."""

    def __init__(self, *args: Any, lazy_epilog: Callable[[], str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy_epilog = lazy_epilog

    def format_help(self) -> str:
        if self._lazy_epilog is not None:
            self.epilog, self._lazy_epilog = self._lazy_epilog(), None
        return super().format_help()


def _variables_help() -> str:
    from gateway.config_docs import variables_help  # reads the settings' source: only for --help

    return variables_help(Settings)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="switchyard", description="Anthropic Messages API gateway with cache-aware prompting."
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = sub.add_parser(
        "serve",
        help="run the gateway (configured by environment variables)",
        description="Run the gateway. Configured by environment variables only (listed below).",
        lazy_epilog=_variables_help,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--host", default=None, help="overrides GATEWAY_HOST")
    serve.add_argument("--port", default=None, help="overrides GATEWAY_PORT")
    serve.set_defaults(func=cmd_serve)

    agent = sub.add_parser(
        "agent",
        add_help=False,
        help="run a headless agent with the built-in tools (switchyard agent --help)",
    )
    agent.add_argument("argv", nargs=argparse.REMAINDER)  # handled in main() by loop.cli

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
        from gateway.logging_setup import flush_logs

        flush_logs()  # log lines already written go out before the error (the writer batches them)
        for problem in exc.problems or (str(exc),):
            print(f"switchyard: configuration error: {problem}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
