"""Rendering the kustomize overlays with the real kubectl, and reading the rendered objects.

kubectl (with its built-in kustomize) comes with the machine image (google-cloud-cli's ``kubectl``
package, kubectl 1.32 / kustomize 5.5); Debian's ``kubernetes-client`` (1.20) is too old for
kustomize Components. There is no substitute renderer: without kubectl these tests fail.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import AliasChoices

from gateway.config import Settings
from gateway.config_checks import leaf_fields
from tests.support import binaries

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
OVERLAYS = ("anthropic", "bedrock", "vertex", "foundry")
PROXY_COMPONENT = K8S / "components" / "corporate-proxy"
# kustomize's name-hash suffix: 10 characters, no vowels and no 0, 1, 3 (api/hasher.go encodeHash)
HASH_ALPHABET = "2456789bcdfghkmnpqrstvwxz"

Manifest = dict[str, Any]


def kubectl() -> str:
    """kubectl, which renders the k8s/ manifests (``kubectl kustomize``); skips the test without it."""
    return binaries.require("kubectl")


def _kustomize(directory: Path) -> list[Manifest]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"kubectl kustomize {directory}: {result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@functools.cache
def render(overlay: str) -> tuple[Manifest, ...]:
    return tuple(_kustomize(K8S / "overlays" / overlay))


def render_with(overlay: str, workdir: Path, *components: str) -> list[Manifest]:
    """``overlay`` with ``components`` (names under k8s/components/) added to its kustomization,
    the way k8s/README.md tells users to add them (so the overlay's namespace applies to what the
    components bring). Rendered from a copy of k8s/ in ``workdir``."""
    copy = workdir / "k8s"
    shutil.copytree(K8S, copy)
    kustomization = copy / "overlays" / overlay / "kustomization.yaml"
    text = kustomization.read_text()
    assert not re.search(r"^components:", text, re.MULTILINE), f"{kustomization}: already has components"
    listed = "".join(f"  - ../../components/{name}\n" for name in components)
    kustomization.write_text(f"{text}components:\n{listed}")
    return _kustomize(kustomization.parent)


def render_with_proxy(overlay: str, workdir: Path) -> list[Manifest]:
    """``overlay`` plus the corporate-proxy Component."""
    return render_with(overlay, workdir, "corporate-proxy")


def one(manifests: Sequence[Manifest], kind: str, name: str) -> Manifest:
    """The object of ``kind`` named ``name`` (or ``name-<hash>`` for a kustomize-generated one)."""
    pattern = re.compile(rf"^{re.escape(name)}(-[{HASH_ALPHABET}]{{10}})?$")
    found = [m for m in manifests if m["kind"] == kind and pattern.match(m["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def gateway_container(manifests: Sequence[Manifest]) -> Manifest:
    deployment = one(manifests, "Deployment", "switchyard")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "gateway")


def config_map_data(manifests: Sequence[Manifest], name: str) -> dict[str, str]:
    data: dict[str, str] = one(manifests, "ConfigMap", name)["data"]
    return data


def container_env(manifests: Sequence[Manifest]) -> dict[str, Any]:
    """Every variable the gateway container gets: envFrom ConfigMaps' keys, then env entries."""
    container = gateway_container(manifests)
    env: dict[str, Any] = {}
    for source in container.get("envFrom", []):
        env.update(config_map_data(manifests, source["configMapRef"]["name"]))
    for entry in container.get("env", []):
        env[entry["name"]] = entry.get("value", entry.get("valueFrom"))
    return env


def settings_env_names() -> set[str]:
    """The environment variables Settings reads: its field aliases and alias choices."""
    names: set[str] = set()
    for field in leaf_fields(Settings).values():
        if field.alias:
            names.add(field.alias)
        alias = field.validation_alias
        if isinstance(alias, str):
            names.add(alias)
        elif isinstance(alias, AliasChoices):
            names.update(choice for choice in alias.choices if isinstance(choice, str))
    return names


_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def kubelet_expand(value: str, defined: dict[str, str]) -> str:
    """What kubelet makes of an env value: ``$(NAME)`` becomes the value of a variable defined
    before it (envFrom, then earlier env entries), ``$$`` a literal ``$``; an unknown ``$(NAME)``
    stays as written (Kubernetes' third_party/forked/golang/expansion)."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return defined.get(name, match.group(0))

    return _REFERENCE.sub(replace, value)


def pod_environment(
    manifests: Sequence[Manifest], container: Manifest, secrets: dict[str, str]
) -> dict[str, str]:
    """The environment ``container`` starts with: envFrom ConfigMaps, then env entries in order
    (``secretKeyRef`` values from ``secrets``, the Secret's data), expanded as kubelet does."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(config_map_data(manifests, source["configMapRef"]["name"]))
    for entry in container.get("env", []):
        if "valueFrom" in entry:
            env[entry["name"]] = secrets[entry["valueFrom"]["secretKeyRef"]["key"]]
        else:
            env[entry["name"]] = kubelet_expand(entry["value"], env)
    return env


def secret_template() -> Manifest:
    template: Manifest = yaml.safe_load((K8S / "base" / "secret.template.yaml").read_text())
    return template
