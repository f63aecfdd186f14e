"""The chart cannot break a node: kernel parameters set although the proxy is unprivileged,
names resolved without the cluster DNS the proxy programs, kube-proxy's own ConfigMap mounted
where kube-proxy mounts it, and monitoring that could never scrape refused."""

from __future__ import annotations

import helm_python as helm
import pytest

from tests.chart.chart_kit import (
    init_containers,
    kinds,
    mounts_by_path,
    only,
    pod_spec,
    proxy_container,
    render,
    volumes_by_name,
)


def _config_arg(container: dict[str, object]) -> str:
    args = container["args"]
    assert isinstance(args, list)
    (config,) = (arg for arg in args if arg.startswith("--config="))
    assert isinstance(config, str)
    return config


def test_by_default_a_privileged_init_container_sets_the_parameters_for_an_unprivileged_proxy() -> (
    None
):
    objects = render()
    init = init_containers(objects)["kernel-parameters"]
    proxy = proxy_container(objects)
    # kube-proxy's --init-only: only a privileged container sees /proc/sys writable.
    assert init["securityContext"] == {"privileged": True}
    assert init["args"][:2] == ["run", "--init-only"]
    assert _config_arg(init) == _config_arg(proxy)
    assert mounts_by_path(init)["/var/lib/ipvsproxy"] == mounts_by_path(proxy)["/var/lib/ipvsproxy"]
    assert init["image"] == proxy["image"]
    # The proxy itself keeps its capabilities only, and no writable view of the host's /proc.
    assert "privileged" not in proxy["securityContext"]
    assert not any(path.startswith("/proc") for path in mounts_by_path(proxy))
    assert not any(
        volume.get("hostPath", {}).get("path", "").startswith("/proc")
        for volume in volumes_by_name(objects).values()
    )


def test_no_init_container_where_the_proxy_can_write_them_itself_or_is_told_not_to() -> None:
    assert "kernel-parameters" not in init_containers(render({"privileged": True}))
    assert "initContainers" not in pod_spec(render({"initKernelParameters": False}))


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"metrics": {"serviceMonitor": {"enabled": True}}}, "metrics.serviceMonitor.enabled"),
        ({"metrics": {"prometheusRule": {"enabled": True}}}, "metrics.prometheusRule.enabled"),
    ],
)
def test_monitoring_of_metrics_on_loopback_is_refused(
    values: dict[str, object], named: str
) -> None:
    with pytest.raises(helm.HelmRenderError) as refused:
        render(values)
    assert f"{named} needs metrics.bindAddress beyond loopback" in str(refused.value)


def test_kube_proxys_own_configmap_is_mounted_where_kube_proxy_mounts_it() -> None:
    objects = render({"existingConfigMap": {"name": "kube-proxy", "key": "config.conf"}})
    assert "ConfigMap" not in kinds(objects)
    volume = volumes_by_name(objects)["config"]
    assert volume["configMap"]["name"] == "kube-proxy"
    for container in (proxy_container(objects), init_containers(objects)["kernel-parameters"]):
        # kubeadm's config.conf names /var/lib/kube-proxy/kubeconfig.conf beside it.
        assert _config_arg(container) == "--config=/var/lib/kube-proxy/config.conf"
        assert mounts_by_path(container)["/var/lib/kube-proxy"]["name"] == "config"
    template = only(objects, "DaemonSet")["spec"]["template"]
    assert "checksum/config" not in template["metadata"].get("annotations", {})
