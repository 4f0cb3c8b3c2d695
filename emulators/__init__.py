"""Faithful, deterministic emulators of the Anthropic Messages API's upstreams: first party
(:mod:`.first_party`), Bedrock, Vertex AI and Foundry (``run_emulator(..., provider=NAME)``).

An independent oracle for the gateway's tests: nothing here imports ``gateway`` or ``loop``.
Repository tooling, not part of the installed package. Public API::

    from emulators import EmulatorConfig, ManualClock, create_app, run_emulator

    app = create_app(EmulatorConfig())                       # aiohttp.web.Application
    async with run_emulator(EmulatorConfig(clock=ManualClock()), port=0) as emu:
        emu.base_url, emu.requests, emu.clock, emu.cache

    serve(EmulatorConfig(), "127.0.0.1", 8080)               # blocking, until SIGINT/SIGTERM

Select behaviour per request with the header ``x-emulator-scenario: NAME`` or a marker
``[[scenario:NAME]]`` in the user's prompt text; scenarios are ``text`` (default), ``tool_use``,
``agent``, ``thinking``, ``max_tokens``, ``stop_sequence``, ``pause_turn``, ``refusal``,
``model_context_window_exceeded``, ``stream_error`` and ``error:<status>``. Tool directives:
``[[tool:NAME]]`` / ``x-emulator-tool`` and ``[[tools:a,b]]`` / ``x-emulator-tools``. See
``README.md`` in this package for the token rule and the cache model.
"""

from .cache_model import CacheEntry, CacheUsage, PromptCache
from .catalog import DEFAULT_CATALOG, ModelCatalog, ModelSpec
from .clock import Clock, ManualClock, SystemClock
from .config import DEFAULT_API_KEY, EmulatorConfig
from .errors import ApiError
from .first_party import create_app
from .output import ModelOutput
from .recorder import RecordedRequest, RequestLog
from .runner import RunningEmulator, emulator_in_thread, run_emulator, serve
from .scenarios import SCENARIO_HEADER, SCENARIOS, TOOL_HEADER, TOOLS_HEADER, Scenario
from .state import EmulatorState, get_state

__all__ = [
    "DEFAULT_API_KEY",
    "DEFAULT_CATALOG",
    "SCENARIOS",
    "SCENARIO_HEADER",
    "TOOLS_HEADER",
    "TOOL_HEADER",
    "ApiError",
    "CacheEntry",
    "CacheUsage",
    "Clock",
    "EmulatorConfig",
    "EmulatorState",
    "ManualClock",
    "ModelCatalog",
    "ModelOutput",
    "ModelSpec",
    "PromptCache",
    "RecordedRequest",
    "RequestLog",
    "RunningEmulator",
    "Scenario",
    "SystemClock",
    "create_app",
    "emulator_in_thread",
    "get_state",
    "run_emulator",
    "serve",
]
