"""The optional kustomize components: the ingress (TLS from outside the cluster) and the
corporate proxy, whose NO_PROXY and NetworkPolicy must send the same destinations direct.

Rendered with the real kubectl; built-in objects validated strictly against the Kubernetes schemas.
NO_PROXY is interpreted with the gateway's own matcher (``gateway.transport.bypasses_proxy``).
"""

from __future__ import annotations

import copy
import ipaddress
import re
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from gateway.config import Settings
from gateway.transport import bypasses_proxy
from tests.deploy.manifests import (
    K8S,
    OVERLAYS,
    Manifest,
    config_map_data,
    one,
    render_with,
)

KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
CRD_GROUPS = ("monitoring.coreos.com/",)
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
# where the cloud overlays' credential calls go (and must go direct)
METADATA = {"bedrock": "169.254.170.23", "vertex": "169.254.169.254"}


def _validate(manifests: list[Manifest]) -> set[str]:
    kinds = set()
    for manifest in manifests:
        if manifest["apiVersion"].startswith(CRD_GROUPS):
            continue
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(manifest, version, strict=True)
        kinds.add(manifest["kind"])
    return kinds


# -- ingress ---------------------------------------------------------------------------------------


def _nginx_size(value: str) -> int:
    """ingress-nginx's size syntax (nginx's): a number with an optional k or m (KiB, MiB)."""
    match = re.fullmatch(r"(\d+)([kKmM]?)", value)
    assert match, value
    return int(match.group(1)) * {"": 1, "k": 1024, "m": 1024 * 1024}[match.group(2).lower()]


def test_ingress_component_serves_the_gateway_over_tls(tmp_path: Path) -> None:
    manifests = render_with("anthropic", tmp_path / "k", "ingress")
    assert "Ingress" in _validate(manifests)
    ingress = one(manifests, "Ingress", "switchyard")
    assert ingress["metadata"]["namespace"] == "switchyard"
    spec = ingress["spec"]
    hosts = [rule["host"] for rule in spec["rules"]]
    assert [h for tls in spec["tls"] for h in tls["hosts"]] == hosts == ["switchyard.example.com"]
    assert spec["tls"][0]["secretName"] == "switchyard-tls"
    service = one(manifests, "Service", "switchyard")
    ports = {port["name"] for port in service["spec"]["ports"]}
    for rule in spec["rules"]:
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            assert backend["name"] == service["metadata"]["name"] and backend["port"]["name"] in ports
            assert (path["path"], path["pathType"]) == ("/", "Prefix")
    # the controller must pass what the gateway accepts: bodies up to its limit, waits up to its
    # first-byte timeout, and SSE unbuffered
    defaults = Settings.from_environ({})
    annotations = ingress["metadata"]["annotations"]
    assert annotations["cert-manager.io/cluster-issuer"].startswith("REPLACE_")
    assert _nginx_size(annotations["nginx.ingress.kubernetes.io/proxy-body-size"]) >= defaults.listener.max_body_bytes
    for timeout in ("proxy-read-timeout", "proxy-send-timeout"):
        assert int(annotations[f"nginx.ingress.kubernetes.io/{timeout}"]) >= defaults.egress.first_byte_timeout_s
    assert annotations["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"


def test_ingress_component_admits_the_controller_namespace(tmp_path: Path) -> None:
    without = one(render_with("anthropic", tmp_path / "a"), "NetworkPolicy", "switchyard")
    policy = one(render_with("anthropic", tmp_path / "b", "ingress"), "NetworkPolicy", "switchyard")
    added = policy["spec"]["ingress"][len(without["spec"]["ingress"]) :]
    assert policy["spec"]["ingress"][: len(without["spec"]["ingress"])] == without["spec"]["ingress"]
    assert added == [
        {
            "from": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
            ],
            "ports": [{"port": "http", "protocol": "TCP"}],
        }
    ]
    readme = (K8S / "README.md").read_text()
    assert "kubernetes.io/metadata.name" in readme and "ingress-nginx" in readme
    assert "components/ingress" in readme


def test_both_components_together(tmp_path: Path) -> None:
    manifests = render_with("bedrock", tmp_path / "k", "ingress", "corporate-proxy")
    assert {"Ingress", "NetworkPolicy", "Deployment"} <= _validate(manifests)
    policy = one(manifests, "NetworkPolicy", "switchyard")
    assert any("namespaceSelector" in peer for rule in policy["spec"]["ingress"] for peer in rule["from"])
    assert policy["spec"]["egress"][2]["ports"] == [{"port": 3128, "protocol": "TCP"}]


# -- corporate proxy: NO_PROXY and the NetworkPolicy agree -----------------------------------------


def _no_proxy_networks(no_proxy: str) -> set[Network]:
    networks = set()
    for entry in no_proxy.split(","):
        try:
            networks.add(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            continue  # a name
    return networks


def _direct_443(policy: Manifest) -> set[Network]:
    """Destinations the policy lets out on 443 (the proxy's rule uses its own port)."""
    found: set[Network] = set()
    for rule in policy["spec"]["egress"]:
        if any(port["port"] == 443 for port in rule["ports"]):
            for peer in rule["to"]:
                assert "except" not in peer["ipBlock"], "443 to a range minus holes: not a private list"
                found.add(ipaddress.ip_network(peer["ipBlock"]["cidr"]))
    return found


def _allowed(policy: Manifest, address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return any(
        ip in ipaddress.ip_network(peer["ipBlock"]["cidr"])
        for rule in policy["spec"]["egress"]
        for peer in rule["to"]
        if "ipBlock" in peer
    )


def mismatch(manifests: list[Manifest]) -> dict[str, Any]:
    """What NO_PROXY sends direct but the policy drops on 443, and the reverse (both empty when
    consistent). Loopback never leaves the pod; link-local entries are the metadata endpoints,
    allowed on their own ports by the cloud overlays (checked separately)."""
    no_proxy = config_map_data(manifests, "switchyard-config")["NO_PROXY"]
    direct = {n for n in _no_proxy_networks(no_proxy) if not (n.is_loopback or n.is_link_local)}
    allowed = _direct_443(one(manifests, "NetworkPolicy", "switchyard"))
    return {"only in NO_PROXY": direct - allowed, "only in the NetworkPolicy": allowed - direct}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_proxy_and_network_policy_send_the_same_destinations_direct(overlay: str, tmp_path: Path) -> None:
    manifests = render_with(overlay, tmp_path / "k", "corporate-proxy")
    assert mismatch(manifests) == {"only in NO_PROXY": set(), "only in the NetworkPolicy": set()}
    no_proxy = config_map_data(manifests, "switchyard-config")["NO_PROXY"]
    private = {ipaddress.ip_network(c) for c in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")}
    assert _direct_443(one(manifests, "NetworkPolicy", "switchyard")) == private
    # the gateway's own NO_PROXY matcher: private endpoints by IP or endpoint name go direct,
    # the public cloud endpoints through the proxy
    for host in ("10.20.30.40", "172.31.0.9", "192.168.1.5", "vpce-0a1b-xyz.bedrock-runtime.us-east-1.vpce.amazonaws.com",
                 "us-east5-aiplatform-myendpoint.p.googleapis.com", "switchyard-redis.switchyard.svc"):  # fmt: skip
        assert bypasses_proxy(host, 443, no_proxy), host
    for host in ("bedrock-runtime.us-east-1.amazonaws.com", "us-east5-aiplatform.googleapis.com",
                 "api.anthropic.com", "8.8.8.8", "sts.amazonaws.com"):  # fmt: skip
        assert not bypasses_proxy(host, 443, no_proxy), host
    # a cloud overlay's metadata endpoint is direct in NO_PROXY and allowed by its policy rule
    policy = one(manifests, "NetworkPolicy", "switchyard")
    if overlay in METADATA:
        assert bypasses_proxy(METADATA[overlay], 80, no_proxy) and _allowed(policy, METADATA[overlay])


def test_the_consistency_check_catches_a_drift(tmp_path: Path) -> None:
    manifests = render_with("anthropic", tmp_path / "k", "corporate-proxy")
    narrowed = copy.deepcopy(manifests)
    config = one(narrowed, "ConfigMap", "switchyard-config")
    config["data"]["NO_PROXY"] = config["data"]["NO_PROXY"].replace(",172.16.0.0/12", ",10.9.8.7")
    assert mismatch(narrowed) == {
        "only in NO_PROXY": {ipaddress.ip_network("10.9.8.7/32")},
        "only in the NetworkPolicy": {ipaddress.ip_network("172.16.0.0/12")},
    }


def test_the_private_ranges_are_documented(tmp_path: Path) -> None:
    component = (K8S / "components" / "corporate-proxy" / "kustomization.yaml").read_text()
    readme = (K8S / "README.md").read_text()
    no_proxy = config_map_data(
        render_with("anthropic", tmp_path / "k", "corporate-proxy"), "switchyard-config"
    )["NO_PROXY"]
    for network in _no_proxy_networks(no_proxy):
        if network.is_private and not (network.is_loopback or network.is_link_local):
            assert str(network) in readme and component.count(str(network)) >= 3  # comment, NO_PROXY, policy
