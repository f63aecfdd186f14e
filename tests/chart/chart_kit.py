"""The chart rendered and linted by Helm's own Go library (helm-python-sdk), offline."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

CHART = Path(__file__).resolve().parents[2] / "charts" / "ipvsproxy"
RELEASE = "ipvsproxy"
NAMESPACE = "kube-system"

Manifest = dict[str, Any]


def render_files(values: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Each template's output by path, as `helm template` renders it."""
    with helm.Chart.load(CHART) as chart:
        return chart.render(dict(values or {}), name=RELEASE, namespace=NAMESPACE, is_install=True)


def render(values: Mapping[str, Any] | None = None) -> list[Manifest]:
    """The rendered Kubernetes objects (NOTES.txt is text, not an object)."""
    objects: list[Manifest] = []
    for path, text in sorted(render_files(values).items()):
        if path.endswith(".yaml"):
            objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


def notes(values: Mapping[str, Any] | None = None) -> str:
    return render_files(values)[f"{CHART.name}/templates/NOTES.txt"]


def only(objects: list[Manifest], kind: str) -> Manifest:
    found = [obj for obj in objects if obj["kind"] == kind]
    assert len(found) == 1, f"{len(found)} objects of kind {kind}"
    return found[0]


def kinds(objects: list[Manifest]) -> list[str]:
    return sorted(obj["kind"] for obj in objects)


def pod_spec(objects: list[Manifest]) -> Manifest:
    spec: Manifest = only(objects, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def proxy_container(objects: list[Manifest]) -> Manifest:
    containers: list[Manifest] = pod_spec(objects)["containers"]
    (container,) = (c for c in containers if c["name"] == "ipvsproxy")
    return container


def init_containers(objects: list[Manifest]) -> dict[str, Manifest]:
    """The pod's init containers by name."""
    return {c["name"]: c for c in pod_spec(objects).get("initContainers", [])}


def config_files(objects: list[Manifest]) -> dict[str, str]:
    data: dict[str, str] = only(objects, "ConfigMap")["data"]
    return data


def proxy_config(objects: list[Manifest]) -> Manifest:
    """The KubeProxyConfiguration the ConfigMap holds."""
    document: Manifest = yaml.safe_load(config_files(objects)["config.yaml"])
    return document


def mounts_by_path(container: Manifest) -> dict[str, Manifest]:
    return {mount["mountPath"]: mount for mount in container.get("volumeMounts", [])}


def volumes_by_name(objects: list[Manifest]) -> dict[str, Manifest]:
    return {volume["name"]: volume for volume in pod_spec(objects)["volumes"]}


def lint(values: Mapping[str, Any] | None = None) -> list[str]:
    """`helm lint --strict` findings above info level (warnings count as failures)."""
    report = helm.lint(CHART, dict(values or {}), strict=True, namespace=NAMESPACE)
    findings = [f"{m['path']}: {m['error']}" for m in report["messages"] if m["severity"] >= 2]
    return [*findings, *report["errors"]]


def walk(value: Any) -> Iterator[Any]:
    """Every value nested in a manifest, depth first."""
    yield value
    if isinstance(value, dict):
        for item in value.values():
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)
