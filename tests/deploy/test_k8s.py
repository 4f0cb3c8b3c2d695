"""The k8s/ manifests: every overlay renders with kubectl kustomize and every object is valid.

Built-in kinds are validated offline against the Kubernetes OpenAPI schemas (kubernetes-validate,
strict: unknown fields fail) for the oldest and newest versions we support. The Prometheus
Operator's CRDs (ServiceMonitor, PrometheusRule) have no schema there: they are checked
structurally below (field names, references, durations, and that they carry the current rules).
The manifests are also checked against the gateway itself: env var names, a full Settings
validation per overlay, probe paths, ports, and the graceful-shutdown budget.

Not here: two gateway replicas sharing one Redis (alternating one session's requests) belongs to
the cache issue, which brings the session store.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from gateway.app import create_app
from gateway.config import Settings
from tests.deploy.manifests import (
    K8S,
    OVERLAYS,
    ROOT,
    Manifest,
    config_map_data,
    container_env,
    gateway_container,
    one,
    pod_environment,
    render,
    render_with_proxy,
    secret_template,
    settings_env_names,
)
from tests.support.tls import make_pki

KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
CRD_GROUPS = ("monitoring.coreos.com/",)
# Read by the SDKs the gateway uses rather than by Settings. The corporate-proxy component sets the
# first two; the rest are injected by platform webhooks (IRSA, EKS Pod Identity, AKS Workload
# Identity) and never written in these manifests, but an operator setting them is not a typo.
SDK_ENV = {
    "AWS_CA_BUNDLE": "botocore (STS credential exchange through a TLS-inspecting proxy)",
    "REQUESTS_CA_BUNDLE": "requests, under google-auth and azure-identity's token calls",
    "AWS_ROLE_ARN": "botocore web identity (IRSA webhook)",
    "AWS_WEB_IDENTITY_TOKEN_FILE": "botocore web identity (IRSA webhook)",
    "AWS_STS_REGIONAL_ENDPOINTS": "botocore (IRSA webhook)",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI": "botocore (EKS Pod Identity webhook)",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": "botocore (EKS Pod Identity webhook)",
    "AZURE_CLIENT_ID": "azure-identity (AKS Workload Identity webhook)",
    "AZURE_TENANT_ID": "azure-identity (AKS Workload Identity webhook)",
    "AZURE_FEDERATED_TOKEN_FILE": "azure-identity (AKS Workload Identity webhook)",
    "AZURE_AUTHORITY_HOST": "azure-identity (AKS Workload Identity webhook)",
}
# Set in the manifests for kubelet, not for a reader: $(REDIS_PASSWORD) is expanded into
# GATEWAY_SESSION_STORE when the container starts.
KUBELET_ONLY_ENV = {"REDIS_PASSWORD": "interpolated into GATEWAY_SESSION_STORE"}
DURATION = re.compile(r"^(0|([0-9]+(ms|s|m|h|d|w|y))+)$")
SERVICE_MONITOR_ENDPOINT_FIELDS = {
    "port", "targetPort", "path", "scheme", "params", "interval", "scrapeTimeout", "tlsConfig",
    "authorization", "basicAuth", "oauth2", "bearerTokenSecret", "honorLabels", "honorTimestamps",
    "metricRelabelings", "relabelings", "proxyUrl", "followRedirects", "enableHttp2", "filterRunning",
}  # fmt: skip
RULE_FIELDS = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(scope="module")
def rendered(overlay: str) -> tuple[Manifest, ...]:
    return render(overlay)


@pytest.fixture(scope="module")
def gateway_routes() -> set[tuple[str, str]]:
    settings = Settings.from_environ({"GATEWAY_API_KEYS": "k", "ANTHROPIC_API_KEY": "u"})
    app = create_app(settings)
    return {
        (route.method, info["path"])
        for route in app.router.routes()
        if "path" in (info := route.resource.get_info() if route.resource else {})
    }


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("k8s_generate", K8S / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- rendering and schemas -------------------------------------------------------------------------


def test_overlay_renders_the_expected_objects(overlay: str, rendered: tuple[Manifest, ...]) -> None:
    hashed = re.compile(r"^switchyard-config-[a-z0-9]{10}$")  # the configMapGenerator's name
    objects = sorted(
        (
            m["kind"],
            "switchyard-config-<hash>" if hashed.match(m["metadata"]["name"]) else m["metadata"]["name"],
        )
        for m in rendered
    )
    assert objects == [
        ("ConfigMap", "switchyard-config-<hash>"),
        ("ConfigMap", "switchyard-dashboards"),
        ("Deployment", "switchyard"),
        ("HorizontalPodAutoscaler", "switchyard"),
        ("NetworkPolicy", "switchyard"),
        ("NetworkPolicy", "switchyard-redis"),
        ("PodDisruptionBudget", "switchyard"),
        ("PodDisruptionBudget", "switchyard-redis"),
        ("PrometheusRule", "switchyard-alerts"),
        ("Service", "switchyard"),
        ("Service", "switchyard-redis"),
        ("ServiceAccount", "switchyard"),
        ("ServiceMonitor", "switchyard"),
        ("StatefulSet", "switchyard-redis"),
    ]
    for manifest in rendered:
        assert manifest["metadata"]["namespace"] == "switchyard"
        assert manifest["metadata"]["labels"]["app.kubernetes.io/part-of"] == "switchyard"
    assert config_map_data(rendered, "switchyard-config")["GATEWAY_PROVIDER"] == overlay


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_builtin_objects_match_the_kubernetes_schemas(rendered: tuple[Manifest, ...], version: str) -> None:
    checked = 0
    for manifest in rendered:
        if manifest["apiVersion"].startswith(CRD_GROUPS):
            continue
        kubernetes_validate.validate(manifest, version, strict=True)
        checked += 1
    assert checked == 12


def test_validation_catches_a_misspelt_field() -> None:
    """The schema check is strict: a typo in a field name is an error, not ignored."""
    deployment = json.loads(json.dumps(one(render("anthropic"), "Deployment", "switchyard")))
    deployment["spec"]["template"]["spec"]["terminationGracePeriodSecond"] = 75
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[-1], strict=True)


def test_secret_template_is_valid_and_holds_only_placeholders() -> None:
    template = secret_template()
    kubernetes_validate.validate(template, KUBERNETES_VERSIONS[-1], strict=True)
    for key, value in template["stringData"].items():
        for line in value.splitlines():
            assert line.split()[0].startswith("REPLACE_"), f"{key}: not a placeholder: {line!r}"
    for overlay in OVERLAYS:  # never rendered, so never applied by accident
        assert not [m for m in render(overlay) if m["kind"] == "Secret"]


def test_every_secret_reference_names_a_template_key(rendered: tuple[Manifest, ...]) -> None:
    template = secret_template()
    name, keys = template["metadata"]["name"], set(template["stringData"])
    refs: list[tuple[str, str]] = []
    for workload in (m for m in rendered if m["kind"] in ("Deployment", "StatefulSet")):
        pod = workload["spec"]["template"]["spec"]
        for volume in pod["volumes"]:
            if "secret" in volume:
                refs += [(volume["secret"]["secretName"], item["key"]) for item in volume["secret"]["items"]]
        for container in pod["containers"]:
            for entry in container.get("env", []):
                if "secretKeyRef" in entry.get("valueFrom", {}):
                    ref = entry["valueFrom"]["secretKeyRef"]
                    refs.append((ref["name"], ref["key"]))
    for endpoint in one(rendered, "ServiceMonitor", "switchyard")["spec"]["endpoints"]:
        credentials = endpoint["authorization"]["credentials"]
        refs.append((credentials["name"], credentials["key"]))
    assert refs
    for secret_name, key in refs:
        assert (secret_name, key in keys) == (name, True), (secret_name, key)


# -- the Prometheus Operator objects (CRDs: structural checks) -------------------------------------


def test_service_monitor_scrapes_the_gateway_metrics_endpoint(
    rendered: tuple[Manifest, ...], gateway_routes: set[tuple[str, str]]
) -> None:
    monitor = one(rendered, "ServiceMonitor", "switchyard")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    service = one(rendered, "Service", "switchyard")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    port_names = {port["name"] for port in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert set(endpoint) <= SERVICE_MONITOR_ENDPOINT_FIELDS, (
            set(endpoint) - SERVICE_MONITOR_ENDPOINT_FIELDS
        )
        assert endpoint["port"] in port_names
        assert ("GET", endpoint["path"]) in gateway_routes
        assert endpoint["scheme"] == "http"
        assert DURATION.match(endpoint["interval"]) and DURATION.match(endpoint["scrapeTimeout"])
        assert endpoint["authorization"]["type"] == "Bearer"  # the gateway accepts Bearer keys


def test_prometheus_rule_carries_the_current_alert_rules(rendered: tuple[Manifest, ...]) -> None:
    rule = one(rendered, "PrometheusRule", "switchyard-alerts")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(rule["spec"]) == {"groups"}
    source = yaml.safe_load((ROOT / "dashboards" / "alerts.rules.yml").read_text())
    assert rule["spec"]["groups"] == source["groups"]
    for group in rule["spec"]["groups"]:
        assert isinstance(group["name"], str) and group["rules"]
        for entry in group["rules"]:
            assert set(entry) <= RULE_FIELDS, set(entry) - RULE_FIELDS
            assert ("alert" in entry) != ("record" in entry)
            assert isinstance(entry["expr"], str) and entry["expr"].strip()
            assert "for" not in entry or DURATION.match(entry["for"])
            for mapping in (entry.get("labels", {}), entry.get("annotations", {})):
                assert all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items())


def test_dashboards_config_map_holds_the_current_dashboard_json(rendered: tuple[Manifest, ...]) -> None:
    config_map = one(rendered, "ConfigMap", "switchyard-dashboards")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    files = {path.name: path.read_text() for path in sorted((ROOT / "dashboards" / "grafana").glob("*.json"))}
    assert files, "no dashboards in dashboards/"
    assert config_map["data"] == files


def test_generated_files_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(K8S / "generate.py"), "--check"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def test_generator_detects_stale_output_and_bad_input(tmp_path: Path) -> None:
    generate = _load_generator()
    dashboards, out = tmp_path / "dashboards", tmp_path / "out"
    dashboards.mkdir()
    with pytest.raises(generate.GenerationError, match=r"alerts\.rules\.yml: not found"):
        generate.render(dashboards)
    (dashboards / "alerts.rules.yml").write_text(
        "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: |\n      up == 0\n    for: 5m\n"
    )
    with pytest.raises(generate.GenerationError, match=r"no grafana/\*\.json"):
        generate.render(dashboards)
    (dashboards / "grafana").mkdir()
    (dashboards / "grafana" / "a.json").write_text('{"title": "A", "panels": []}\n')
    assert generate.main(["--dashboards", str(dashboards), "--out", str(out)]) == 0
    assert generate.main(["--check", "--dashboards", str(dashboards), "--out", str(out)]) == 0
    (dashboards / "grafana" / "a.json").write_text('{"title": "A2", "panels": []}\n')
    assert generate.stale(dashboards, out) == ["dashboards-configmap.yaml"]
    assert generate.main(["--check", "--dashboards", str(dashboards), "--out", str(out)]) == 1
    configmap = yaml.safe_load((out / "dashboards-configmap.yaml").read_text())
    assert configmap["data"] == {"a.json": '{"title": "A", "panels": []}\n'}
    (dashboards / "grafana" / "b.json").write_text("[1, 2]")
    with pytest.raises(generate.GenerationError, match="not a Grafana dashboard"):
        generate.render(dashboards)
    (dashboards / "grafana" / "b.json").unlink()
    (dashboards / "alerts.rules.yml").write_text("groups:\n- name: g\n  rules:\n  - alert: A\n")
    with pytest.raises(generate.GenerationError, match="needs 'expr'"):
        generate.render(dashboards)


# -- the manifests against the gateway ---------------------------------------------------------------


def _unknown_env(manifests: Sequence[Manifest]) -> set[str]:
    return set(container_env(manifests)) - settings_env_names() - set(SDK_ENV) - set(KUBELET_ONLY_ENV)


def test_every_env_var_set_is_one_the_gateway_reads(rendered: tuple[Manifest, ...]) -> None:
    assert not _unknown_env(rendered), "not read by the gateway (typo?)"
    assert {"GATEWAY_DRAIN_TIMEOUT_S", "GATEWAY_SESSION_STORE", "AWS_REGION"} <= settings_env_names()
    typo = [dict(m) for m in rendered]
    config = one(typo, "ConfigMap", "switchyard-config")
    config["data"] = {**config["data"], "GATEWAY_DRAIN_TIMEOUT": "60"}
    assert _unknown_env(typo) == {"GATEWAY_DRAIN_TIMEOUT"}  # the check does catch one


def _settings_for(manifests: tuple[Manifest, ...] | list[Manifest], tmp_path: Path) -> Settings:
    """Validate the pod's environment with Settings, as the container would at start-up.

    Secret values come from the template (placeholders); a path into a mounted volume is replaced
    by a local file with that volume's content, and must be under a mount (or the pod would fail).
    """
    container = gateway_container(manifests)
    pod = one(manifests, "Deployment", "switchyard")["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    secret_data = secret_template()["stringData"]
    environ: dict[str, str] = {}
    for name, value in pod_environment(manifests, container, secret_data).items():
        if name in KUBELET_ONLY_ENV:
            continue
        if value.startswith("/etc/"):
            mount = next(m for m in container["volumeMounts"] if value.startswith(m["mountPath"] + "/"))
            volume = volumes[mount["name"]]
            local = tmp_path / name
            if "secret" in volume:
                item = next(
                    i for i in volume["secret"]["items"] if f"{mount['mountPath']}/{i['path']}" == value
                )
                local.write_text(secret_data[item["key"]])
            else:  # a ConfigMap the operator creates (the CA bundle): start-up loads it as PEM
                (tmp_path / "pki").mkdir(exist_ok=True)
                local.write_bytes(make_pki(tmp_path / "pki").ca_cert.read_bytes())
            environ[name] = str(local)
        else:
            environ[name] = value
    settings = Settings.from_environ(environ)
    settings.require_startable()
    return settings


def test_each_overlay_is_a_valid_gateway_configuration(
    overlay: str, rendered: tuple[Manifest, ...], tmp_path: Path
) -> None:
    settings = _settings_for(rendered, tmp_path)
    assert settings.provider.value == overlay
    assert settings.listener.host == "0.0.0.0"
    assert len(settings.inbound_keys) == 2
    assert [key.role.value for key in settings.inbound_keys] == ["client", "metrics"]
    password = secret_template()["stringData"]["redis-password"]
    assert settings.cache.session_store == f"redis://:{password}@switchyard-redis:6379/0"
    provider_settings = {
        "anthropic": (settings.anthropic.api_key,),
        "bedrock": (settings.bedrock.region,),
        "vertex": (settings.vertex.project_id, settings.vertex.region),
        "foundry": (settings.foundry.resource, settings.foundry.api_key),
    }
    assert None not in provider_settings[overlay]


def test_corporate_proxy_component(tmp_path: Path) -> None:
    manifests = render_with_proxy("vertex", tmp_path / "kustomize")
    for manifest in manifests:
        if not manifest["apiVersion"].startswith(CRD_GROUPS):
            kubernetes_validate.validate(manifest, KUBERNETES_VERSIONS[-1], strict=True)
    assert not _unknown_env(manifests), "not read by the gateway (typo?)"
    settings = _settings_for(manifests, tmp_path)
    assert settings.egress.https_proxy == "http://proxy.corp.example:3128"
    assert settings.egress.ca_bundle is not None and "metadata.google.internal" in settings.egress.no_proxy
    container = gateway_container(manifests)
    assert {"name": "ca-bundle", "mountPath": "/etc/switchyard/ca", "readOnly": True} in container[
        "volumeMounts"
    ]
    policy = one(manifests, "NetworkPolicy", "switchyard")
    https_rule = policy["spec"]["egress"][2]
    assert https_rule["ports"] == [{"port": 3128, "protocol": "TCP"}]  # the proxy replaced "443 anywhere"
    # 443 leaves direct only to private addresses (the endpoints NO_PROXY sends direct;
    # tests/deploy/test_k8s_components.py checks the two lists agree)
    for rule in policy["spec"]["egress"]:
        if any(port["port"] == 443 for port in rule["ports"]):
            blocks = [peer["ipBlock"] for peer in rule["to"]]
            assert blocks and all(
                ipaddress.ip_network(b["cidr"]).is_private and "except" not in b for b in blocks
            )


def test_probes_ports_and_service_agree_with_the_gateway(
    rendered: tuple[Manifest, ...], gateway_routes: set[tuple[str, str]]
) -> None:
    container = gateway_container(rendered)
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    env = container_env(rendered)
    assert ports == {"http": int(env["GATEWAY_PORT"])}
    probes = {
        kind: container[kind]["httpGet"] for kind in ("startupProbe", "readinessProbe", "livenessProbe")
    }
    assert probes["readinessProbe"]["path"] == "/readyz"
    assert probes["livenessProbe"]["path"] == probes["startupProbe"]["path"] == "/healthz"
    for probe in probes.values():
        assert ("GET", probe["path"]) in gateway_routes
        assert probe["port"] in ports
    service = one(rendered, "Service", "switchyard")
    deployment = one(rendered, "Deployment", "switchyard")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    for port in service["spec"]["ports"]:
        target = port["targetPort"]
        assert (ports[target] if isinstance(target, str) else target) == ports["http"]
    for named in ("switchyard", "switchyard-redis"):  # NetworkPolicy named ports exist on their pods
        policy = one(rendered, "NetworkPolicy", named)
        selected = policy["spec"]["podSelector"]["matchLabels"]
        workload = next(
            m
            for m in rendered
            if m["kind"] in ("Deployment", "StatefulSet")
            and selected.items() <= m["spec"]["template"]["metadata"]["labels"].items()
        )
        names = {p["name"] for c in workload["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
        for rule in policy["spec"].get("ingress", []):
            assert {p["port"] for p in rule["ports"] if isinstance(p["port"], str)} <= names


def test_deployment_is_hardened_and_drains_within_the_grace_period(rendered: tuple[Manifest, ...]) -> None:
    deployment = one(rendered, "Deployment", "switchyard")
    pod = deployment["spec"]["template"]["spec"]
    container = gateway_container(rendered)
    env = container_env(rendered)
    assert "replicas" not in deployment["spec"]  # the HPA owns the count (minReplicas 3)
    # the gateway needs the drain timeout plus service.ABORT_GRACE_S (2 s) and its exit
    assert pod["terminationGracePeriodSeconds"] >= float(env["GATEWAY_DRAIN_TIMEOUT_S"]) + 5
    assert float(env["GATEWAY_DRAIN_DELAY_S"]) < float(env["GATEWAY_DRAIN_TIMEOUT_S"])
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    assert container["securityContext"] == {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    tmp = next(m for m in container["volumeMounts"] if m["mountPath"] == "/tmp")
    assert "emptyDir" in next(v for v in pod["volumes"] if v["name"] == tmp["name"])
    zones = [c for c in pod["topologySpreadConstraints"] if c["topologyKey"] == "topology.kubernetes.io/zone"]
    assert zones and zones[0]["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert container["resources"] == {
        "requests": {"cpu": "500m", "memory": "128Mi"},
        "limits": {"cpu": "1", "memory": "512Mi"},
    }
    redis = one(rendered, "StatefulSet", "switchyard-redis")["spec"]["template"]["spec"]
    assert redis["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    assert all("persistentVolumeClaim" not in v for v in redis["volumes"])


def test_autoscaling_and_disruption_budget(rendered: tuple[Manifest, ...]) -> None:
    hpa = one(rendered, "HorizontalPodAutoscaler", "switchyard")["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "switchyard"}
    assert hpa["minReplicas"] == 3
    metrics = {m["type"]: m for m in hpa["metrics"]}
    assert metrics["Resource"]["resource"]["name"] == "cpu"
    assert metrics["Pods"]["pods"]["metric"]["name"] == "gateway_inflight_streams"
    exported = (ROOT / "gateway" / "metrics.py").read_text()
    assert '"gateway_inflight_streams"' in exported  # the metric the adapter turns into a Pods metric
    pdb = one(rendered, "PodDisruptionBudget", "switchyard")["spec"]
    assert pdb["maxUnavailable"] == 1
    assert (
        pdb["selector"]["matchLabels"]
        == one(rendered, "Deployment", "switchyard")["spec"]["selector"]["matchLabels"]
    )


def test_cloud_overlays_use_workload_identity() -> None:
    def annotations(overlay: str) -> dict[str, str]:
        result: dict[str, str] = one(render(overlay), "ServiceAccount", "switchyard")["metadata"].get(
            "annotations", {}
        )
        return result

    assert annotations("bedrock")["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")
    assert annotations("vertex")["iam.gke.io/gcp-service-account"].endswith(".iam.gserviceaccount.com")
    assert annotations("anthropic") == annotations("foundry") == {}
    session_store = {"REDIS_PASSWORD", "GATEWAY_SESSION_STORE"}
    for overlay, keys in {
        "anthropic": {"ANTHROPIC_API_KEY"},
        "foundry": {"ANTHROPIC_FOUNDRY_API_KEY"},
        "bedrock": set(),  # no static credentials at all
        "vertex": set(),
    }.items():
        env = {e["name"] for e in gateway_container(render(overlay)).get("env", [])}
        assert env == keys | session_store


def test_readme_documents_every_overlay() -> None:
    readme = (K8S / "README.md").read_text()
    for overlay in OVERLAYS:
        assert f"kubectl apply --server-side -k k8s/overlays/{overlay}" in readme
    assert "terminationGracePeriodSeconds" in readme and "gateway_inflight_streams" in readme
