"""The fleet component (k8s/components/fleet): sign-in through the company IdP, the policy file,
telemetry forwarding, for any provider overlay.

Rendered with the real kubectl together with the ingress component (as k8s/README.md tells users
to add them), built-in objects validated strictly against the Kubernetes schemas, and checked
against the gateway itself: every variable is one it reads; the pod's environment, with the
mounted files written out with the content kubelet would give them, is a startable configuration
with sign-in and the policy on; the policy in the ConfigMap loads with the gateway's own loader;
the secrets reach the pod as files only; the ingress routes every path the fleet serves; the
policy's reload sees a kubelet-style ``..data`` symlink swap on a real directory.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from gateway.app import create_app
from gateway.config import Settings
from gateway.fleet.policy_file import load_policy
from gateway.fleet.policy_reload import PolicyReloader
from gateway.transport import bypasses_proxy
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
    render_with,
    secret_template,
    settings_env_names,
)
from tests.deploy.test_k8s import KUBELET_ONLY_ENV, SDK_ENV
from tests.support.tls import make_pki

KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
CRD_GROUPS = ("monitoring.coreos.com/",)
COMPONENT = K8S / "components" / "fleet"
FLEET_SECRET_KEYS = {"oidc-client-secret", "token-signing-keys"}
# every path the fleet front door serves (sign-in, policy, telemetry intake, admin API)
FLEET_PATHS = {
    ("GET", "/.well-known/oauth-authorization-server"),
    ("POST", "/oauth/device_authorization"),
    ("GET", "/oauth/device"),
    ("POST", "/oauth/device"),
    ("GET", "/oauth/callback"),
    ("POST", "/oauth/confirm"),
    ("POST", "/oauth/token"),
    ("POST", "/oauth/revoke"),
    ("GET", "/managed/settings"),
    ("GET", "/api/oauth/usage"),
    ("POST", "/v1/metrics"),
    ("POST", "/v1/logs"),
    ("POST", "/v1/traces"),
    ("GET", "/v1/organizations/spend_limits"),
    ("PUT", "/v1/organizations/spend_limits"),
}


def fleet_render(overlay: str, workdir: Path, *more: str) -> list[Manifest]:
    return render_with(overlay, workdir, "ingress", "fleet", *more)


def _mounts(manifests: Sequence[Manifest]) -> list[tuple[Manifest, Manifest]]:
    """(volumeMount, volume) pairs of the gateway container."""
    pod = one(manifests, "Deployment", "switchyard")["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    return [(mount, volumes[mount["name"]]) for mount in gateway_container(manifests)["volumeMounts"]]


def mounted_files(manifests: Sequence[Manifest]) -> dict[str, tuple[str, str]]:
    """Every file the gateway container sees under a Secret or ConfigMap volume: path ->
    (``secret`` or ``configMap``, content). Secret values come from the template (the keys the
    operator creates); a ConfigMap must be one the manifests create, except the CA bundle the
    corporate-proxy component asks the operator for (not listed)."""
    secrets = secret_template()["stringData"]
    files: dict[str, tuple[str, str]] = {}
    for mount, volume in _mounts(manifests):
        if "secret" in volume:
            for item in volume["secret"]["items"]:
                files[f"{mount['mountPath']}/{item['path']}"] = ("secret", secrets[item["key"]])
        elif "configMap" in volume:
            name = volume["configMap"]["name"]
            found = [m for m in manifests if m["kind"] == "ConfigMap" and m["metadata"]["name"] == name]
            for config_map in found:
                for key, value in config_map["data"].items():
                    files[f"{mount['mountPath']}/{key}"] = ("configMap", value)
    return files


def operator_files(manifests: Sequence[Manifest]) -> set[str]:
    """Files under the corporate-proxy component's CA bundle mount (a ConfigMap the operator creates)."""
    rendered = {m["metadata"]["name"] for m in manifests if m["kind"] == "ConfigMap"}
    return {
        f"{mount['mountPath']}/ca.crt"
        for mount, volume in _mounts(manifests)
        if "configMap" in volume
        and volume["configMap"]["name"] == "switchyard-ca-bundle"
        and volume["configMap"]["name"] not in rendered
    }


def fleet_settings(manifests: Sequence[Manifest], tmp_path: Path) -> Settings:
    """The pod's environment validated as the container would at start-up, each mounted file
    written under ``tmp_path`` with the content kubelet gives it (a path into no volume fails)."""
    files = mounted_files(manifests)
    environ: dict[str, str] = {}
    secrets = secret_template()["stringData"]
    for name, value in pod_environment(manifests, gateway_container(manifests), secrets).items():
        if name in KUBELET_ONLY_ENV:
            continue
        if value.startswith("/etc/switchyard/"):
            local = tmp_path / value.lstrip("/")
            local.parent.mkdir(parents=True, exist_ok=True)
            if value in files:
                local.write_text(files[value][1])
            else:  # only the CA bundle ConfigMap the operator creates (corporate-proxy) is not rendered
                assert value in operator_files(manifests), f"{name}={value}: no volume provides this file"
                (tmp_path / "pki").mkdir(exist_ok=True)
                local.write_bytes(make_pki(tmp_path / "pki").ca_cert.read_bytes())
            value = str(local)
        environ[name] = value
    settings = Settings.from_environ(environ)
    settings.require_startable()
    return settings


def _validate(manifests: Sequence[Manifest]) -> set[str]:
    kinds = set()
    for manifest in manifests:
        if manifest["apiVersion"].startswith(CRD_GROUPS):
            continue
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(manifest, version, strict=True)
        kinds.add(manifest["kind"])
    return kinds


def _allows(policy: Manifest, address: str, port: int) -> bool:
    """Whether an ipBlock egress rule of ``policy`` lets ``address:port`` out."""
    ip = ipaddress.ip_address(address)
    for rule in policy["spec"]["egress"]:
        if not any(p["port"] == port for p in rule.get("ports", [])):
            continue
        for peer in rule["to"]:
            block = peer.get("ipBlock")
            holes = block.get("except", []) if block else []
            if (
                block
                and ip in ipaddress.ip_network(block["cidr"])
                and not any(ip in ipaddress.ip_network(hole) for hole in holes)
            ):
                return True
    return False


# -- rendering, schemas, settings ------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_fleet_component_is_a_valid_configuration_on_every_overlay(overlay: str, tmp_path: Path) -> None:
    manifests = fleet_render(overlay, tmp_path / "k")
    assert {"Deployment", "ConfigMap", "Ingress", "NetworkPolicy", "StatefulSet"} <= _validate(manifests)
    policy_map = one(manifests, "ConfigMap", "switchyard-policy")
    assert policy_map["metadata"]["name"] == "switchyard-policy"  # no hash: updated in place, no rollout
    assert policy_map["metadata"]["labels"]["app.kubernetes.io/part-of"] == "switchyard"
    assert all(manifest["metadata"]["namespace"] == "switchyard" for manifest in manifests)
    unknown = set(container_env(manifests)) - settings_env_names() - set(SDK_ENV) - set(KUBELET_ONLY_ENV)
    assert not unknown, "not read by the gateway (typo?)"
    settings = fleet_settings(manifests, tmp_path / "pod")
    assert settings.provider.value == overlay
    signin = settings.signin
    assert signin.oidc_issuer is not None and signin.oidc_issuer.startswith("https://")
    assert signin.public_url is not None and signin.oidc_client_id
    assert signin.oidc_client_secret is None and signin.oidc_client_secret_file is not None
    template = secret_template()["stringData"]
    assert signin.oidc_client_secret_file.read_text() == template["oidc-client-secret"]
    assert signin.token_signing_keys_file is not None
    assert "offline_access" in signin.oidc_scopes.split()
    assert settings.policy.policy_file is not None and settings.policy.policy_reload_s > 0
    password = template["redis-password"]
    # sign-in state and counters shared by the replicas: the base's Redis Service
    assert settings.cache.session_store == f"redis://:{password}@switchyard-redis:6379/0"
    redis_service = one(manifests, "Service", "switchyard-redis")
    assert any(port["port"] == 6379 for port in redis_service["spec"]["ports"])
    assert settings.telemetry.otlp_forward_urls and settings.telemetry.telemetry_groups
    # the sign-in's per-IP limits read the header the ingress component's controller (ingress-nginx) writes
    assert settings.listener.trusted_proxies
    assert settings.listener.trusted_proxy_header == "x-forwarded-for"


def test_the_check_catches_a_path_no_volume_provides(tmp_path: Path) -> None:
    manifests = fleet_render("anthropic", tmp_path / "k")
    config = one(manifests, "ConfigMap", "switchyard-config")
    config["data"]["GATEWAY_POLICY_FILE"] = "/etc/switchyard/policy/policy.yml"
    with pytest.raises(AssertionError, match="no volume provides"):
        fleet_settings(manifests, tmp_path / "pod")


def test_secrets_reach_the_pod_as_files_only(tmp_path: Path) -> None:
    manifests = fleet_render("foundry", tmp_path / "k")
    template = secret_template()
    assert set(template["stringData"]) >= FLEET_SECRET_KEYS
    files = mounted_files(manifests)
    env = container_env(manifests)
    for variable, key in (
        ("GATEWAY_OIDC_CLIENT_SECRET_FILE", "oidc-client-secret"),
        ("GATEWAY_TOKEN_SIGNING_KEYS_FILE", "token-signing-keys"),
    ):
        assert files[env[variable]] == ("secret", template["stringData"][key]), variable
    assert "GATEWAY_OIDC_CLIENT_SECRET" not in env
    # no environment entry carries a fleet secret, as a literal or from the Secret
    container = gateway_container(manifests)
    for entry in container["env"]:
        reference = entry.get("valueFrom", {}).get("secretKeyRef", {})
        assert reference.get("key") not in FLEET_SECRET_KEYS, entry["name"]
    literals = " ".join(config_map_data(manifests, "switchyard-config").values())
    literals += " ".join(str(entry.get("value", "")) for entry in container["env"])
    for key in FLEET_SECRET_KEYS:
        for line in template["stringData"][key].splitlines():
            assert line.strip() not in literals, key
    # every Secret reference names a template key; none is mounted with subPath (never updated)
    for mount, volume in _mounts(manifests):
        assert "subPath" not in mount, mount["name"]
        if "secret" in volume:
            assert volume["secret"]["secretName"] == template["metadata"]["name"]
            assert {item["key"] for item in volume["secret"]["items"]} <= set(template["stringData"])
    # the policy ConfigMap is mounted as a directory, read-only
    policy_mount, policy_volume = next((m, v) for m, v in _mounts(manifests) if "configMap" in v)
    assert policy_volume["configMap"]["name"] == "switchyard-policy" and policy_mount["readOnly"] is True
    assert env["GATEWAY_POLICY_FILE"] == f"{policy_mount['mountPath']}/policy.yaml"


def test_the_policy_in_the_config_map_loads_with_the_gateway_loader(tmp_path: Path) -> None:
    manifests = fleet_render("bedrock", tmp_path / "k")
    content = config_map_data(manifests, "switchyard-policy")["policy.yaml"]
    assert content == (COMPONENT / "policy.yaml").read_text()
    path = tmp_path / "policy.yaml"
    path.write_text(content)
    spec = load_policy(path)
    assert spec.groups and spec.base.models is not None and spec.base.spend_caps is not None
    assert spec.base.managed_settings  # what /managed/settings serves
    reloader = PolicyReloader(path, interval_s=10)
    assert reloader.policy.spec == spec
    # the telemetry groups are groups the policy knows (a typo would put everyone in "other")
    telemetry_groups = config_map_data(manifests, "switchyard-config")["GATEWAY_TELEMETRY_GROUPS"].split(",")
    assert set(telemetry_groups) <= {g.group for g in spec.groups} | set(spec.admin_groups)


# -- the policy's reload sees kubelet's update of a ConfigMap volume --------------------------------


def _kubelet_write(volume: Path, files: dict[str, str], generation: int) -> None:
    """What kubelet's AtomicWriter does on a ConfigMap update: the new files in a fresh timestamped
    directory, a ``..data_tmp`` symlink to it renamed over ``..data`` (atomic), the old directory
    removed; each visible file is a symlink ``name -> ..data/name`` made on the first write."""
    new = volume / f"..2026_12_02_02_0{generation}_00.{1000 + generation}"
    new.mkdir()
    for name, text in files.items():
        (new / name).write_text(text)
    old = os.readlink(volume / "..data") if (volume / "..data").is_symlink() else None
    os.symlink(new.name, volume / "..data_tmp")
    os.replace(volume / "..data_tmp", volume / "..data")
    for name in files:
        if not (volume / name).is_symlink():
            os.symlink(f"..data/{name}", volume / name)
    if old is not None:
        shutil.rmtree(volume / old)


def test_policy_reload_sees_a_config_map_symlink_swap(tmp_path: Path) -> None:
    volume = tmp_path / "policy"
    volume.mkdir()
    first = (COMPONENT / "policy.yaml").read_text()
    _kubelet_write(volume, {"policy.yaml": first}, 1)
    reloader = PolicyReloader(volume / "policy.yaml", interval_s=10)
    assert [g.group for g in reloader.policy.spec.groups] == ["contractors", "ml-research"]
    assert not reloader.check()  # nothing changed
    # the new version has the same size and modification time: only the swap tells them apart
    second = first.replace("group: contractors", "group: consultants")
    assert len(second) == len(first)
    stat = os.stat(volume / "policy.yaml")
    _kubelet_write(volume, {"policy.yaml": second}, 2)
    os.utime(volume / "..data" / "policy.yaml", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert reloader.check()
    assert [g.group for g in reloader.policy.spec.groups] == ["consultants", "ml-research"]
    assert (reloader.reloads, reloader.failures) == (1, 0)
    # an invalid version swapped in is refused and the policy in force stays
    _kubelet_write(volume, {"policy.yaml": second.replace("daily_usd: 15", "daily_usd: -1")}, 3)
    assert not reloader.check()
    assert reloader.failures == 1
    assert [g.group for g in reloader.policy.spec.groups] == ["consultants", "ml-research"]


# -- the ingress and the NetworkPolicy ------------------------------------------------------------


def test_the_ingress_routes_every_fleet_path_to_the_gateway(tmp_path: Path) -> None:
    manifests = fleet_render("anthropic", tmp_path / "k")
    settings = fleet_settings(manifests, tmp_path / "pod")
    app = create_app(settings)
    served = {
        (route.method, info["path"])
        for route in app.router.routes()
        if "path" in (info := route.resource.get_info() if route.resource else {})
    }
    assert served >= FLEET_PATHS, FLEET_PATHS - served
    ingress = one(manifests, "Ingress", "switchyard")
    public = urlsplit(settings.signin.public_url or "")
    assert public.scheme == "https" and public.path in ("", "/")
    rules = [rule for rule in ingress["spec"]["rules"] if rule["host"] == public.hostname]
    assert rules, "GATEWAY_PUBLIC_URL's host is not the ingress host"
    assert any(public.hostname in tls["hosts"] for tls in ingress["spec"]["tls"])
    service = one(manifests, "Service", "switchyard")
    for _, path in sorted(FLEET_PATHS | {("GET", "/oauth/callback")}):
        backends = [
            entry["backend"]["service"]
            for rule in rules
            for entry in rule["http"]["paths"]
            if entry["pathType"] == "Prefix"
            and (
                entry["path"] == "/"
                or path == entry["path"]
                or path.startswith(entry["path"].rstrip("/") + "/")
            )
        ]
        assert backends and backends[0]["name"] == service["metadata"]["name"], path
    # the controller passes what the telemetry intake accepts
    body = ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-body-size"]
    assert int(body.removesuffix("m")) * 1024 * 1024 >= settings.telemetry.telemetry_max_body_bytes


def test_network_policy_lets_the_fleet_reach_the_idp_and_the_collector(tmp_path: Path) -> None:
    without = one(render("vertex"), "NetworkPolicy", "switchyard")
    manifests = fleet_render("vertex", tmp_path / "k")
    policy = one(manifests, "NetworkPolicy", "switchyard")
    added = [rule for rule in policy["spec"]["egress"] if rule not in without["spec"]["egress"]]
    assert len(policy["spec"]["egress"]) == len(without["spec"]["egress"]) + len(added)
    kept = [rule for rule in policy["spec"]["egress"] if rule in without["spec"]["egress"]]
    assert kept == without["spec"]["egress"]
    # a public IdP (any public address) on 443, as the provider's endpoints
    issuer = urlsplit(config_map_data(manifests, "switchyard-config")["GATEWAY_OIDC_ISSUER"])
    assert issuer.scheme == "https" and (issuer.port or 443) == 443
    assert _allows(policy, "104.18.0.1", 443) and not _allows(policy, "104.18.0.1", 80)
    # the collector: <service>.<namespace>.svc:<port> is the rule's namespace and port
    [collector_rule] = added
    collector = urlsplit(config_map_data(manifests, "switchyard-config")["GATEWAY_OTLP_FORWARD_URLS"])
    host = collector.hostname or ""
    assert host.endswith(".svc")
    namespace = host.split(".")[1]
    peer = collector_rule["to"][0]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": namespace}
    assert collector_rule["ports"] == [{"port": collector.port, "protocol": "TCP"}]


def test_with_the_corporate_proxy_the_idp_goes_through_it(tmp_path: Path) -> None:
    manifests = fleet_render("bedrock", tmp_path / "k", "corporate-proxy")
    _validate(manifests)
    config = config_map_data(manifests, "switchyard-config")
    issuer = urlsplit(config["GATEWAY_OIDC_ISSUER"]).hostname or ""
    collector = urlsplit(config["GATEWAY_OTLP_FORWARD_URLS"])
    assert not bypasses_proxy(issuer, 443, config["NO_PROXY"])  # through the proxy, allowed to it
    assert bypasses_proxy(collector.hostname or "", collector.port or 80, config["NO_PROXY"])
    policy = one(manifests, "NetworkPolicy", "switchyard")
    assert policy["spec"]["egress"][2]["ports"] == [{"port": 3128, "protocol": "TCP"}]
    assert any(
        rule["ports"] == [{"port": collector.port, "protocol": "TCP"}] for rule in policy["spec"]["egress"]
    )
    fleet_settings(manifests, tmp_path / "pod")  # CA bundle: an operator ConfigMap, not rendered


def test_docs_show_how_to_add_the_component() -> None:
    k8s_readme = (K8S / "README.md").read_text()
    readme = (ROOT / "README.md").read_text()
    fleet_section = readme[readme.index("## Roll out to a fleet") : readme.index("## Deploy")]
    for text in (k8s_readme, fleet_section):
        assert "../../components/fleet" in text
        for key in FLEET_SECRET_KEYS:
            assert key in text
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component"
    assert "REPLACE" in (COMPONENT / "kustomization.yaml").read_text()
