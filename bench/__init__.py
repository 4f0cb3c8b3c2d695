"""Benchmark harness for the switchyard gateway (``make bench`` / ``python -m bench``), the soak and
the demo: repository tools, not part of the installed package (run from the repository root).

Modules: :mod:`.payloads` (request and reply bodies), :mod:`.fake_upstream` (fast fake Anthropic
API), :mod:`.passthrough` (bare aiohttp pass-through, the floor), :mod:`.client` (raw HTTP/1.1
client connection), :mod:`.loadgen` (closed-loop load generator), :mod:`.procinfo` (``/proc`` CPU
and memory readings), :mod:`.processes` (child process management), :mod:`.servers` (spawning the
servers under test), :mod:`.report` (statistics, CPU per request, ratios, targets), :mod:`.tables`
(text tables), :mod:`.runner` (the procedure), :mod:`.cli` (command line), and the ``profile``
sub-command: :mod:`.profiling`, :mod:`.pyspy` (py-spy on demand), :mod:`.frames` (top frames);
the ``startup`` sub-command: :mod:`.startup` (start-up time, modules loaded, import times).
The ``fleet-overhead`` sub-command (sign-in tokens + policy vs static keys): :mod:`.fleet_overhead`,
:mod:`.fleet_setup` (keys, policy, tokens), :mod:`.fleet_checks`, :mod:`.fleet_report`.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The checkout's root: the working directory of the bench's own children (``python -m bench...``,
``python -m emulators``), which are importable from there only."""
