# switchyard — the two quick-start commands are `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: venv demo test soak lint bench bench-rate-limits profile clean constraints dashboards k8s

# Create the venv and install the project with the pinned dependency set (constraints.txt).
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# The demo and the benches are repository tools (bench/, emulators/): run from this directory.
demo: $(STAMP)
	$(BIN)/python -m bench.demo

test: $(STAMP)
	$(BIN)/python -m pytest

# Long runs kept out of `make test`: Claude Code's default retries against a persistent 529
# (about 3 minutes per CLI version of its own back-off), then the gateway soak (1,000 streams held
# 60 s, then 30 minutes of mixed traffic; README "Soak"): every figure in soak-results.json.
soak: $(STAMP)
	SWITCHYARD_SLOW_TESTS=1 $(BIN)/python -m pytest tests/e2e/test_retry_budget_claude_code.py
	$(BIN)/python -m bench.soak --json soak-results.json

lint: $(STAMP)
	$(BIN)/ruff check gateway loop emulators bench tests k8s
	$(BIN)/mypy --strict gateway loop emulators bench k8s/generate.py
	$(BIN)/python -m tests.support.import_graph gateway loop
	$(BIN)/python -m tests.support.import_graph emulators
	$(BIN)/python -m tests.support.import_graph bench
	$(BIN)/hadolint Dockerfile

# Regenerate k8s/base/generated/ (PrometheusRule, Grafana dashboards ConfigMap) from dashboards/.
k8s: $(STAMP)
	$(BIN)/python k8s/generate.py

# Regenerate the Grafana dashboards (dashboards/grafana/*.json) from dashboards/build.py.
dashboards: $(STAMP)
	$(BIN)/python dashboards/build.py

# Direct, bare aiohttp pass-through (the floor) and gateway side by side, then the other benches.
bench: $(STAMP)
	$(BIN)/python -m bench --json bench-results.json
	$(BIN)/python -m bench.eventstream_bench
	$(BIN)/python -m bench.provider_latency
	$(BIN)/python -m bench.cache_efficiency
	$(BIN)/python -m bench.failover_cache --json bench-failover-cache.json
	$(BIN)/python -m bench.fleet_overhead --json bench-fleet-overhead.json
	$(BIN)/python -m bench.context_session --json bench-context.json

# Rate-limit accuracy (issue 17): a requests-per-minute policy held for 30 s under load, within 5 %.
bench-rate-limits: $(STAMP)
	$(BIN)/python -m bench.rate_limits --seconds 30

# py-spy profile of the gateway under load (py-spy is installed on demand into ~/.cache/switchyard).
profile: $(STAMP)
	$(BIN)/python -m bench profile --mode nonstream
	$(BIN)/python -m bench profile --mode stream

# Re-pin after changing dependencies: installs the newest allowed versions into a scratch venv.
constraints:
	rm -rf .venv-pin && $(PYTHON) -m venv .venv-pin
	.venv-pin/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	.venv-pin/bin/python -m pip freeze --all --exclude-editable | grep -v -e '^switchyard' -e '^pip==' > constraints.txt
	rm -rf .venv-pin

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
