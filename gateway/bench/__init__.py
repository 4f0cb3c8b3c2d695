"""Benchmark harness for the switchyard gateway (``make bench`` / ``python -m gateway.bench``).

Modules: :mod:`.payloads` (request and reply bodies), :mod:`.fake_upstream` (fast fake Anthropic
API), :mod:`.client` (raw HTTP/1.1 client connection), :mod:`.loadgen` (closed-loop load
generator), :mod:`.procinfo` (``/proc`` CPU and memory readings), :mod:`.processes` (child
process management), :mod:`.report` (statistics, table, targets), :mod:`.runner` (the procedure)
and :mod:`.cli` (command line).
"""
