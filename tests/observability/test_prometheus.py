"""Dashboards and alerts against a real Prometheus scraping a gateway that serves emulated traffic.

Two gateways share one metrics registry (one process, as in a pod): one in front of the
first-party emulator, one in front of the Bedrock emulator. Prometheus scrapes ``/metrics`` every
second with a bearer key and evaluates the alert rules every second. The traffic covers normal and
streamed requests for two teams, cache writes (5m and 1h) and reads, retries, a model fallback, a
watchdog abort replaced by a non-streaming fallback, 4xx and 5xx answers and a dropped beta, a
malformed HTTP request and a team over its in-flight cap (429; the connection row), and
agent-loop runs (``loop_traffic``: a compaction, a recovered-then-refused prompt, a max_turns stop)
counted into the same registry. A third gateway, on the same registry, serves from two upstreams
(``upstream_traffic``: a first-party emulator that starts answering 529s, then Bedrock): a session
moves, the primary's breaker opens and later requests skip it, so the "Upstreams" row is checked
against real series. Then
every expression of every dashboard panel must parse and return a finite value, every rule must
evaluate cleanly, and the dashboard's spend over the run must equal the spend computed here from
the usage the clients received and the price table.

Prometheus scrapes with the gateway's metrics-only key (role=metrics), under two job names (two
deployments on one Prometheus): the ``$job`` variable must keep them apart. A third team sends
one request in the first round only; evaluated over a window after it, no panel may show NaN
(0/0 for a team without tokens, or a quantile of empty buckets).

Spend series are primed at zero before the first scrape (``GatewayMetrics.prime``), so evaluating
``increase(...[$__range])`` at the last scrape involves no extrapolation: the comparison is exact.
"""

from __future__ import annotations

import asyncio
import collections
import json
import math
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Literal

import anthropic
import orjson
import pytest
from anthropic.types import TextBlockParam

from emulators import RunningEmulator
from emulators.upstreams import emulated_upstream
from gateway.app import create_app
from gateway.config import Settings
from gateway.loop_metrics import LoopMetrics
from gateway.metrics import GatewayMetrics
from gateway.process import running
from gateway.providers.bedrock import BedrockProvider
from tests.observability.loop_traffic import loop_traffic
from tests.observability.prom import (
    JOB,
    MISSING,
    PROMETHEUS,
    PROMTOOL,
    Prometheus,
    finite_values,
    running_prometheus,
    scrape_config,
)
from tests.observability.rig import (
    HAIKU,
    KEY,
    METRICS_KEY,
    QUIET_KEY,
    QUIET_TEAM,
    SONNET,
    TEAM,
    TEAM_KEY,
    USER,
    cached_system,
    expected_cost,
    gateway_rig,
    key_file,
)
from tests.providers.bedrock_harness import apply_aws_env, bedrock_upstream

pytestmark = pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None, reason=MISSING)

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
RULES = DASHBOARDS / "alerts.rules.yml"
# Grafana's variables as the test evaluates them: every value, windows that cover the whole run
SUBSTITUTIONS = {
    "$__rate_interval": "1m",
    "$__range": "1h",
    "$job": JOB,
    "$namespace": ".*",
    "$instance": ".*",
    "$provider": ".*",
    "$model": ".*",
    "$team": ".*",
}
OTHER_JOB = "switchyard-other-deployment"  # a second job scraping the same target
# Panels allowed to return no data, with the reason. Keep it empty unless traffic cannot produce it.
EXEMPT: dict[str, str] = {}
BEDROCK_MODEL = "claude-sonnet-4-5"

Spend = list[tuple[str, str, str, Any]]  # (provider, served model, team, SDK usage)


def promtool(*args: str, cwd: Path = DASHBOARDS) -> None:
    assert PROMTOOL is not None
    result = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, cwd=cwd)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_checks_and_unit_tests_the_rules() -> None:
    promtool("check", "rules", str(RULES))
    promtool("test", "rules", "alerts.test.yml")


def test_example_scrape_config_is_valid(tmp_path: Path) -> None:
    example = (DASHBOARDS / "prometheus.example.yml").read_text(encoding="utf-8")
    key = tmp_path / "key"
    key.write_text("sk-example\n")
    (tmp_path / "prometheus.yml").write_text(example.replace("/etc/prometheus/switchyard-key", str(key)))
    shutil.copy(RULES, tmp_path / "alerts.rules.yml")
    promtool("check", "config", "prometheus.yml", cwd=tmp_path)


def panel_targets() -> list[tuple[str, str, str]]:
    """(dashboard title, panel title, expression) of every panel target."""
    found = []
    for path in sorted((DASHBOARDS / "grafana").glob("*.json")):
        if path.name == "switchyard-fleet.json":  # OTLP traffic: tests/fleet/test_fleet_dashboard.py
            continue
        document = orjson.loads(path.read_bytes())
        for panel in document["panels"]:
            for target in panel.get("targets", []):
                found.append((document["title"], panel["title"], target["expr"]))
    return found


def substitute(expr: str, **overrides: str) -> str:
    for variable, value in {**SUBSTITUTIONS, **{f"${k}": v for k, v in overrides.items()}}.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, expr
    return expr


def system(round: int, ttl: Literal["5m", "1h"] = "5m") -> list[TextBlockParam]:
    """A cacheable system prompt of its own per round and TTL: each round writes, then reads."""
    return cached_system(ttl, prefix=f"Round {round} ({ttl}). ")


async def first_party_traffic(client: Any, team_client: Any, spend: Spend, round: int) -> None:
    for _ in range(2):  # a cache write, then a read
        message = await team_client.messages.create(
            model=SONNET, max_tokens=32, system=system(round), messages=USER
        )
        spend.append(("anthropic", SONNET, TEAM, message.usage))
    system_1h = system(round, "1h")
    async with client.messages.stream(model=SONNET, max_tokens=32, system=system_1h, messages=USER) as stream:
        spend.append(("anthropic", SONNET, "default", (await stream.get_final_message()).usage))
    message = await team_client.messages.create(model=HAIKU, max_tokens=32, messages=USER)
    spend.append(("anthropic", HAIKU, TEAM, message.usage))
    await client.messages.count_tokens(model=SONNET, messages=USER)


async def faulty_traffic(gateway_url: str, spend: Spend, round: int) -> None:
    def client(fault: str, key: str) -> anthropic.AsyncAnthropic:
        headers = {"x-emulator-fault": fault, "x-emulator-fault-key": f"{key}-{round}"}
        return anthropic.AsyncAnthropic(
            api_key=KEY, base_url=gateway_url, max_retries=0, default_headers=headers
        )

    retried = await client("fail_first=2:529", "retries").messages.create(
        model=SONNET, max_tokens=32, messages=USER
    )
    spend.append(("anthropic", SONNET, "default", retried.usage))
    # the third consecutive 529 switches to the fallback model
    fell_back = await client("fail_first=3:529", "model").messages.create(
        model=SONNET, max_tokens=32, messages=USER
    )
    assert fell_back.model.startswith(HAIKU)
    spend.append(("anthropic", HAIKU, "default", fell_back.usage))
    # a stall after two events: watchdog warning, abort, then the non-streaming replay
    async with client("stall_after=2:1", "stall").messages.stream(
        model=SONNET, max_tokens=32, messages=USER
    ) as stream:
        spend.append(("anthropic", SONNET, "default", (await stream.get_final_message()).usage))
    with pytest.raises(anthropic.InternalServerError):
        await client("fail_first=9:500", "errors").messages.create(model=SONNET, max_tokens=32, messages=USER)
    # an error event after content was sent: relayed, counted as an upstream error, and the usage
    # message_start reported is billed
    broken = anthropic.AsyncAnthropic(
        api_key=KEY,
        base_url=gateway_url,
        max_retries=0,
        default_headers={"x-emulator-scenario": "stream_error"},
    )
    with pytest.raises(anthropic.APIStatusError):
        async with broken.messages.stream(model=SONNET, max_tokens=32, messages=USER) as stream:
            async for event in stream:
                if event.type == "message_start":
                    spend.append(("anthropic", SONNET, "default", event.message.usage))
    await broken.close()
    with pytest.raises(anthropic.NotFoundError):
        await client("", "none").messages.create(model="claude-imaginary-9", max_tokens=32, messages=USER)


async def team_rejection(rig: Any, spend: Spend, round: int) -> None:
    """A second request of a team while its first is in flight (the upstream holds its answer
    0.5 s): over GATEWAY_TEAM_MAX_INFLIGHT=1, answered 429 by the gateway."""
    slow = rig.client(
        TEAM_KEY, **{"x-emulator-fault": "stall_headers=0.5", "x-emulator-fault-key": f"slow-{round}"}
    )
    held = asyncio.create_task(slow.messages.create(model=HAIKU, max_tokens=32, messages=USER))
    inflight, deadline = rig.value("gateway_inflight_requests"), time.monotonic() + 5
    while rig.value("gateway_inflight_requests") <= inflight:  # the held request reached the gateway
        assert time.monotonic() < deadline, "the held request never arrived"
        await asyncio.sleep(0.01)
    second = rig.client(TEAM_KEY)
    with pytest.raises(anthropic.RateLimitError):
        await second.messages.create(model=HAIKU, max_tokens=32, messages=USER)
    spend.append(("anthropic", HAIKU, TEAM, (await held).usage))
    await asyncio.gather(slow.close(), second.close())


async def malformed_request(gateway_url: str) -> None:
    """A request line aiohttp's parser refuses: answered 400 JSON, counted by kind."""
    host, port = gateway_url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET /v1/models HTTP/1.1 extra\r\nHost: g\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b" ", 2)[1] == b"400" and orjson.loads(body)["type"] == "error"


async def bedrock_traffic(gateway_url: str, spend: Spend, round: int) -> None:
    client = anthropic.AsyncAnthropic(api_key=TEAM_KEY, base_url=gateway_url, max_retries=0)
    for _ in range(2):
        message = await client.messages.create(
            model=BEDROCK_MODEL,
            max_tokens=32,
            system=system(round),
            messages=USER,
            extra_headers={"anthropic-beta": "request-tags-2026-08-21"},  # not accepted by Bedrock: dropped
        )
        spend.append(("bedrock", BEDROCK_MODEL, TEAM, message.usage))
    async with client.messages.stream(model=BEDROCK_MODEL, max_tokens=32, messages=USER) as stream:
        spend.append(("bedrock", BEDROCK_MODEL, TEAM, (await stream.get_final_message()).usage))
    await client.close()


STORM = "fail_first=1000000:529,retry_after_ms=1"  # every request to the primary answered 529


def upstreams_file(directory: Path, primary_env: dict[str, str], aws: dict[str, str]) -> Path:
    """Two upstreams: the first-party emulator ``primary``, then the Bedrock emulator ``secondary``
    (its credentials: the process's AWS chain, ``apply_aws_env``)."""
    path = directory / "upstreams.json"
    primary = {
        "name": "primary",
        "provider": "anthropic",
        "base_url": primary_env["ANTHROPIC_BASE_URL"],
        "credentials": {"ANTHROPIC_API_KEY": primary_env["ANTHROPIC_API_KEY"]},
    }
    secondary = {
        "name": "secondary",
        "provider": "bedrock",
        "region": aws["AWS_REGION"],
        "base_url": aws["ANTHROPIC_BEDROCK_BASE_URL"],
    }
    sections = {
        "routes": [{"models": ["*"], "upstreams": ["primary", "secondary"]}],
        "breaker": {"failures": 2, "window_s": 60, "open_s": 0.5},
        "failover": {"same_upstream_retries": 0},
    }
    path.write_text(json.dumps({"upstreams": [primary, secondary], **sections}))
    return path


async def upstream_traffic(gateway_url: str, primary: RunningEmulator, spend: Spend, round: int) -> None:
    """A session placed on the primary moves to Bedrock when the primary answers 529s; a second
    failure opens the primary's breaker and the next request skips it. (Round 2 starts after
    ``open_s``: the breaker is half-open, the session's first turn is the probe that closes it.)"""
    session = anthropic.AsyncAnthropic(
        api_key=TEAM_KEY,
        base_url=gateway_url,
        max_retries=0,
        default_headers={"x-claude-code-session-id": f"upstreams-{round}"},
    )
    anonymous = anthropic.AsyncAnthropic(api_key=TEAM_KEY, base_url=gateway_url, max_retries=0)

    prompt = cached_system(prefix=f"Several upstreams, round {round}. ")  # cached by this traffic only

    async def turn(client: anthropic.AsyncAnthropic) -> str:
        raw = await client.messages.with_raw_response.create(
            model=BEDROCK_MODEL, max_tokens=32, system=prompt, messages=USER
        )
        upstream = raw.headers["x-gateway-upstream"]  # GATEWAY_UPSTREAM_HEADER=1
        provider = {"primary": "anthropic", "secondary": "bedrock"}[upstream]
        spend.append((provider, BEDROCK_MODEL, TEAM, (await raw.parse()).usage))
        return upstream

    primary.set_fault("")
    await asyncio.sleep(0.6)  # past open_s: round 2 finds the breaker half-open
    assert await turn(session) == "primary"
    primary.set_fault(STORM)
    assert await turn(session) == "secondary"  # moved: status_529
    assert await turn(anonymous) == "secondary"  # the second failure opens the breaker
    assert await turn(anonymous) == "secondary"  # skipped: breaker_open
    await asyncio.gather(session.close(), anonymous.close())


async def check_panels(
    prometheus: Prometheus, at: float, **overrides: str
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    empty, nan = [], []
    for dashboard, title, expr in panel_targets():
        samples = await prometheus.query(substitute(expr, **overrides), at)  # raises unless it parses
        results.setdefault((dashboard, title), []).extend(samples)
        if not finite_values(samples) and title not in EXEMPT:
            empty.append(f"{dashboard} / {title}: {expr}")
        if any(math.isnan(float(sample["value"][1])) for sample in samples):
            nan.append(f"{dashboard} / {title}: {samples}")
    assert not nan, "panels showing NaN:\n" + "\n".join(nan)
    if not overrides:  # the full-run windows: every panel has data
        assert not empty, "panels without data:\n" + "\n".join(empty)
    return results


async def check_quiet_window(prometheus: Prometheus, at: float, quiet_since: float) -> None:
    """Over a window that starts after the quiet team's only request, its token series exist but
    do not move: an unguarded hit ratio would be 0/0 = NaN for it. No panel may show NaN."""
    window = f"{int(at - quiet_since) - 1}s"
    prompt = f'sum by (team) (rate(gateway_tokens_total{{team="{QUIET_TEAM}",kind!="output"}}[{window}]))'
    (quiet,) = await prometheus.query(prompt, at)
    assert float(quiet["value"][1]) == 0  # the series is there, flat: the case that made NaN
    raw = await prometheus.query(f"{prompt} / {prompt}", at)
    assert math.isnan(float(raw[0]["value"][1]))  # ...as an unguarded division shows
    results = await check_panels(prometheus, at, __rate_interval=window, __range=window)
    by_team = results[("Switchyard / Cache efficiency", "Cache hit ratio by team")]
    assert QUIET_TEAM not in {sample["metric"].get("team") for sample in by_team}


async def check_jobs_apart(prometheus: Prometheus, at: float) -> None:
    """Two jobs scrape the same gateway: the $job variable selects one deployment's series; All
    (.*) sums both, as the dashboards did for every deployment before the variable existed."""
    (_, _, expr) = next(t for t in panel_targets() if t[1] == "Spend (range total)")
    (one_job,) = finite_values(await prometheus.query(substitute(expr), at))
    (other,) = finite_values(await prometheus.query(substitute(expr, job=OTHER_JOB), at))
    (both,) = finite_values(await prometheus.query(substitute(expr, job=".*"), at))
    # (the other job's first scrape may come later: its increase need not equal this one's;
    # _check_spend shows $job=JOB gives exactly the run's spend)
    assert one_job > 0 and other > 0 and both == pytest.approx(one_job + other, rel=1e-9)


async def check_rules(prometheus: Prometheus) -> None:
    expected = set(RULES.read_text().split("- alert: ")[1:])
    rules: list[dict[str, Any]] = []
    for _ in range(40):
        groups = (await prometheus.api("rules"))["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        evaluated = [r for r in rules if r.get("lastEvaluation", "0001")[:4] != "0001"]
        if len(evaluated) == len(expected) and all(r["health"] != "unknown" for r in rules):
            break
        await asyncio.sleep(0.25)
    assert len(rules) == len(expected) == 7
    for rule in rules:
        assert rule["health"] == "ok", (rule["name"], rule.get("lastError"))
        await prometheus.query(rule["query"])  # parses and evaluates through the query API too


async def check_variables(prometheus: Prometheus, at: float) -> None:
    document = orjson.loads((DASHBOARDS / "grafana" / "switchyard-cost.json").read_bytes())
    values: dict[str, set[str]] = {}
    for variable in document["templating"]["list"]:
        if variable["type"] != "query":
            continue
        metric, label = variable["definition"].removeprefix("label_values(").removesuffix(")").rsplit(", ", 1)
        samples = await prometheus.query(f"group by ({label}) ({substitute(metric)})", at)
        values[variable["name"]] = {
            sample["metric"][label] for sample in samples if label in sample["metric"]
        }
    assert values["job"] == {JOB, OTHER_JOB}
    assert values["namespace"] == set()  # a static scrape config: no namespace label (Kubernetes adds it)
    assert len(values["instance"]) == 1
    assert values["provider"] == {"anthropic", "bedrock"}
    assert {SONNET, HAIKU, BEDROCK_MODEL, "other"} <= values["model"]
    assert values["team"] == {TEAM, QUIET_TEAM, "default"}  # not "monitoring": metrics keys spend nothing


async def test_dashboards_and_alerts_on_a_real_prometheus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = time.monotonic()
    metrics = GatewayMetrics()
    loop_metrics = LoopMetrics(metrics.registry)  # an agent loop in the gateway's process
    env = {
        "GATEWAY_FALLBACK_MODEL": HAIKU,
        "GATEWAY_FALLBACK_AFTER_OVERLOADS": "3",
        "GATEWAY_TEAM_MAX_INFLIGHT": "1",  # the traffic is sequential per team but for team_rejection
    }
    async with (
        gateway_rig(tmp_path, env, metrics=metrics) as rig,
        bedrock_upstream(tmp_path) as (aws, _),
        emulated_upstream("anthropic", tmp_path) as primary,
    ):
        apply_aws_env(monkeypatch, aws)
        keys = {"GATEWAY_API_KEYS": KEY, "GATEWAY_API_KEYS_FILE": str(key_file(tmp_path))}
        settings = Settings.from_environ({**keys, **aws})
        bedrock_app = create_app(settings, BedrockProvider(settings), metrics=metrics)
        several = Settings.from_environ(
            {
                **keys,
                "GATEWAY_UPSTREAMS_FILE": str(upstreams_file(tmp_path, primary.env, aws)),
                "GATEWAY_UPSTREAM_HEADER": "1",
            }
        )
        several_app = create_app(several, metrics=metrics)  # its upstream series primed at 0
        async with (
            running(bedrock_app, "127.0.0.1", 0) as bedrock,
            running(several_app, "127.0.0.1", 0) as upstreams,
        ):
            for provider in ("anthropic", "bedrock"):
                metrics.prime(provider, settings.inbound_keys)
            loop_metrics.prime()
            target = rig.base_url.removeprefix("http://")
            config = scrape_config(target, METRICS_KEY, [RULES], jobs=(JOB, OTHER_JOB))
            async with running_prometheus(tmp_path, config) as prometheus:
                await prometheus.scrapes_after(0, 1)  # the zero-valued series are in before any traffic
                spend: Spend = []
                # two rounds a scrape apart, as steady traffic would be: series born in the first
                # round (retry reasons, histograms...) have a rate in the second
                await _traffic(rig, bedrock.base_url, spend, 1)
                await upstream_traffic(upstreams.base_url, primary.emulator, spend, 1)
                await loop_traffic(loop_metrics)
                quiet_since = time.time()
                await prometheus.scrapes_after(quiet_since, 1)
                await _traffic(rig, bedrock.base_url, spend, 2)
                await upstream_traffic(upstreams.base_url, primary.emulator, spend, 2)
                await loop_traffic(loop_metrics)
                # stand-ins until the cache-break detector and the session store (cache issue) call them
                metrics.observe_cache_break("anthropic", "system_changed")
                metrics.session_store_errors.inc()
                at = await prometheus.scrapes_after(max(time.time(), quiet_since + 5), 2)
                results = await check_panels(prometheus, at)
                await check_quiet_window(prometheus, at, quiet_since)
                await check_jobs_apart(prometheus, at)
                await check_rules(prometheus)
                await check_variables(prometheus, at)
    _check_spend(results, spend)
    _check_traffic_shape(results)
    assert time.monotonic() - started < 60


async def _traffic(rig: Any, bedrock_url: str, spend: Spend, round: int) -> None:
    client, team_client = rig.client(KEY), rig.client(TEAM_KEY)
    await first_party_traffic(client, team_client, spend, round)
    if round == 1:  # the quiet team's only request
        quiet = rig.client(QUIET_KEY)
        message = await quiet.messages.create(
            model=SONNET, max_tokens=32, system=system(round), messages=USER
        )
        spend.append(("anthropic", SONNET, QUIET_TEAM, message.usage))
        await quiet.close()
    await faulty_traffic(rig.base_url, spend, round)
    await team_rejection(rig, spend, round)
    await malformed_request(rig.base_url)
    await bedrock_traffic(bedrock_url, spend, round)
    await asyncio.gather(client.close(), team_client.close())
    assert isinstance(rig.emulator, RunningEmulator)


def _check_spend(results: dict[tuple[str, str], list[dict[str, Any]]], spend: Spend) -> None:
    per_team: dict[str, float] = collections.defaultdict(float)
    for provider, model, team, usage in spend:
        per_team[team] += expected_cost(provider, model, usage)
    total = sum(per_team.values())
    assert total > 0
    (dashboard_total,) = finite_values(results[("Switchyard / Cost and tokens", "Spend (range total)")])
    assert dashboard_total == pytest.approx(total, rel=1e-9)
    by_team = {
        sample["metric"]["team"]: float(sample["value"][1])
        for sample in results[("Switchyard / Cost and tokens", "Spend by team (range)")]
    }
    assert by_team == pytest.approx(dict(per_team), rel=1e-9)


def _check_traffic_shape(results: dict[tuple[str, str], list[dict[str, Any]]]) -> None:
    """The faults showed up where the dashboards look for them."""

    def labelled(dashboard: str, title: str, label: str) -> dict[str, float]:
        samples = results[(f"Switchyard / {dashboard}", title)]
        return {sample["metric"].get(label, ""): float(sample["value"][1]) for sample in samples}

    assert labelled("Reliability and latency", "Watchdog aborts (range)", "")[""] == 2
    assert labelled("Cache efficiency", "Dropped betas (range)", "beta").keys() == {"request-tags-2026-08-21"}
    tokens = labelled("Cost and tokens", "Tokens by kind (range)", "kind")
    assert all(
        tokens[kind] > 0 for kind in ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h")
    )
    assert 0 < labelled("Cache efficiency", "Cache hit ratio (range)", "")[""] < 1
    assert labelled("Cache efficiency", "Cache breaks (range)", "")[""] >= 1
    assert labelled("Cache efficiency", "Cache breaks by reason", "reason")["system_changed"] > 0
    assert labelled("Reliability and latency", "Session store errors", "")[""] > 0
    # the connection row: one malformed request and one team 429 per round, nothing shed
    assert labelled("Reliability and latency", "Malformed HTTP (range)", "")[""] == 2
    assert labelled("Reliability and latency", "Team in-flight 429s (range)", "")[""] == 2
    assert labelled("Reliability and latency", "Team in-flight 429s by team", "team")[TEAM] > 0
    assert labelled("Reliability and latency", "Connections shed or refused (range)", "")[""] == 0
    states = labelled("Reliability and latency", "Open connections vs caps", "state")
    assert states.keys() == {"incomplete", "idle", "busy", ""} and states[""] > 0  # "": the caps
    retries = labelled("Reliability and latency", "Retries by reason (retries/s)", "reason")
    assert retries.keys() == {"status_529", "status_500"}
    assert labelled("Reliability and latency", "Fallbacks by kind", "kind").keys() == {
        "model",
        "non_streaming",
    }
    # the agent loop's row (series primed at zero: the range counts both rounds exactly)
    loop_row = {
        title: labelled("Reliability and latency", title, "")[""]
        for title in ("Agent runs (range)", "Compactions (range)", "Breaker trips (range)")
    }
    # per round: three runs; an auto-compaction before the first call of each of the first two
    # and a reactive one in the second; one max_turns stop
    assert loop_row == {"Agent runs (range)": 6, "Compactions (range)": 6, "Breaker trips (range)": 2}
    assert labelled("Reliability and latency", "Runs completed (range)", "")[""] == pytest.approx(1 / 3)
    reasons = labelled("Reliability and latency", "Runs ended by reason", "reason")
    assert {reason for reason, count in reasons.items() if count} == {
        "completed",
        "prompt_too_long",
        "max_turns",
    }
    recoveries = labelled("Reliability and latency", "Recoveries by kind", "kind")
    assert {kind for kind, count in recoveries.items() if count} == {"reactive_compact_retry"}
    _check_upstream_row(results)


def _check_upstream_row(results: dict[tuple[str, str], list[dict[str, Any]]]) -> None:
    """The several-upstreams gateway's two rounds (``upstream_traffic``), as the row shows them."""

    def row(title: str) -> list[dict[str, Any]]:
        return results[("Switchyard / Reliability and latency", title)]

    def single(title: str) -> float:
        (value,) = finite_values(row(title))
        return value

    # per round: two failovers (the moving session's turn, then the request whose failure opens the
    # breaker) and one move. Failovers and re-writes are primed at zero (exact over the run); the
    # move series is born with round 1's move, so its range increase is round 2's, extrapolated
    assert single("Failovers (range)") == 4
    assert single("Session moves (range)") >= 1
    assert single("Cache re-write tokens from moves (range)") > 0  # the moved turns wrote Bedrock's cache
    assert single("Unhealthy upstreams") == 1  # the primary's breaker is open at the end
    breaker_and_health = {
        (s["metric"]["upstream"], float(s["value"][1])) for s in row("Breaker state and health")
    }
    # breaker then health: the primary's breaker is open (2), or half-open (1) if its open_s (0.5 s)
    # ended before the scrape (the state is read at scrape time), its health 0; the secondary's 0 and 1
    primary_breaker = 2.0 if ("primary", 2.0) in breaker_and_health else 1.0
    expected = {("primary", primary_breaker), ("primary", 0.0), ("secondary", 0.0), ("secondary", 1.0)}
    assert breaker_and_health == expected
    reasons = {
        (s["metric"]["upstream"], s["metric"]["reason"])
        for s in row("Requests by upstream and reason (req/s)")
        if float(s["value"][1]) > 0
    }
    assert {("primary", "route"), ("secondary", "failover"), ("secondary", "breaker_open")} <= reasons
    failures = {
        (s["metric"]["upstream"], s["metric"]["reason"]) for s in row("Upstream failures by kind (per s)")
    }
    assert failures == {("primary", "status_529")}
    moves = {
        (s["metric"]["from"], s["metric"]["to"], s["metric"]["reason"])
        for s in row("Session moves by route and reason")
    }
    assert moves == {("primary", "secondary", "status_529")}
    latency = {
        s["metric"]["upstream"]
        for s in row("Upstream latency (to headers)")
        if math.isfinite(float(s["value"][1]))
    }
    assert latency == {"primary", "secondary"}
