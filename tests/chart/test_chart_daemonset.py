"""The DaemonSet runs the proxy as node networking components run."""

from __future__ import annotations

from tests.chart.chart_kit import (
    mounts_by_path,
    only,
    pod_spec,
    proxy_config,
    proxy_container,
    render,
    volumes_by_name,
)

KERNEL_CAPABILITIES = {"NET_ADMIN", "NET_RAW", "SYS_MODULE"}


def test_pods_use_the_node_network_and_run_first_on_every_linux_node() -> None:
    objects = render()
    spec = pod_spec(objects)
    assert spec["hostNetwork"] is True
    # The node's resolver: cluster DNS is a Service the proxy itself programs.
    assert spec["dnsPolicy"] == "Default"
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}


def test_rolling_update_takes_the_configured_number_of_nodes_at_a_time() -> None:
    for value in (1, 3, "25%"):
        daemonset = only(render({"maxUnavailable": value}), "DaemonSet")
        strategy = daemonset["spec"]["updateStrategy"]
        assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": value}}


def test_node_name_comes_from_the_pod_spec() -> None:
    env = proxy_container(render())["env"]
    node_name = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    assert node_name in env


def test_capabilities_by_default_and_privileged_on_request() -> None:
    default = proxy_container(render())["securityContext"]
    assert set(default["capabilities"]["add"]) == KERNEL_CAPABILITIES
    assert default["capabilities"]["drop"] == ["ALL"]
    assert "privileged" not in default
    privileged = proxy_container(render({"privileged": True}))["securityContext"]
    assert privileged == {"privileged": True}


def test_kernel_modules_read_only_and_the_hosts_xtables_lock() -> None:
    objects = render()
    mounts = mounts_by_path(proxy_container(objects))
    volumes = volumes_by_name(objects)
    modules = mounts["/lib/modules"]
    assert modules["readOnly"] is True
    assert volumes[modules["name"]]["hostPath"] == {"path": "/lib/modules", "type": "Directory"}
    lock = mounts["/run/xtables.lock"]
    # iptables opens the lock to flock it: the same file as every other iptables user's.
    assert volumes[lock["name"]]["hostPath"] == {
        "path": "/run/xtables.lock",
        "type": "FileOrCreate",
    }


def test_probes_call_livez_and_healthz_on_the_healthz_port() -> None:
    for port in (10256, 20256):
        container = proxy_container(render({"healthz": {"port": port}}))
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["healthz"] == port
        assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "healthz"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}


def test_probes_go_to_the_one_address_healthz_is_bound_to() -> None:
    objects = render({"healthz": {"bindAddress": "192.0.2.7"}})
    container = proxy_container(objects)
    assert container["livenessProbe"]["httpGet"]["host"] == "192.0.2.7"
    assert container["readinessProbe"]["httpGet"]["host"] == "192.0.2.7"
    assert proxy_config(objects)["healthzBindAddress"] == "192.0.2.7:10256"


def test_resources_reach_the_container() -> None:
    resources = {"requests": {"cpu": "250m", "memory": "200Mi"}, "limits": {"memory": "1Gi"}}
    assert proxy_container(render({"resources": resources}))["resources"] == resources


def test_a_config_change_rolls_the_pods_and_nothing_else_does() -> None:
    def checksum(values: dict[str, object]) -> str:
        template = only(render(values), "DaemonSet")["spec"]["template"]
        annotation: str = template["metadata"]["annotations"]["checksum/config"]
        return annotation

    default = checksum({})
    assert checksum({"ipvs": {"scheduler": "wrr"}}) != default
    assert checksum({"masqueradeAll": True}) != default
    assert checksum({"podLabels": {"a": "b"}}) == default


def test_the_config_file_is_mounted_where_the_args_name_it() -> None:
    objects = render()
    container = proxy_container(objects)
    (config_arg,) = (arg for arg in container["args"] if arg.startswith("--config="))
    config_path = config_arg.removeprefix("--config=")
    directory, _, file_name = config_path.rpartition("/")
    mount = mounts_by_path(container)[directory]
    assert mount["readOnly"] is True
    configmap = only(objects, "ConfigMap")
    assert (
        volumes_by_name(objects)[mount["name"]]["configMap"]["name"]
        == configmap["metadata"]["name"]
    )
    assert file_name in configmap["data"]


def test_no_init_container_ever_cleans_the_node() -> None:
    """A pod start adopts what it finds: a cleanup at every start would cut the node's
    connections (and it did, as cleanupKubeProxy, until the takeover path replaced it)."""
    for values in ({}, {"migration": {"enabled": True}}, {"privileged": True}):
        inits = pod_spec(render(values)).get("initContainers", [])
        assert [init["args"][:2] for init in inits] in ([], [["run", "--init-only"]])


def test_migration_runs_only_on_nodes_with_the_label_beside_the_other_selectors() -> None:
    assert pod_spec(render())["nodeSelector"] == {"kubernetes.io/os": "linux"}
    migrating = {"enabled": True, "nodeLabel": "example.com/proxy", "nodeLabelValue": "ipvs"}

    selector = pod_spec(render({"migration": migrating}))["nodeSelector"]

    assert selector == {"kubernetes.io/os": "linux", "example.com/proxy": "ipvs"}


def test_extra_args_and_env_follow_the_charts_own() -> None:
    objects = render({"extraArgs": ["--v=4"], "extraEnv": [{"name": "TZ", "value": "UTC"}]})
    container = proxy_container(objects)
    assert container["args"][0] == "run"
    assert container["args"][-1] == "--v=4"
    assert container["env"][-1] == {"name": "TZ", "value": "UTC"}


def test_traffic_metrics_off_by_default_and_verbosity_are_flags() -> None:
    assert "--no-traffic-metrics" in proxy_container(render())["args"]
    args = proxy_container(
        render({"metrics": {"trafficMetrics": True}, "logging": {"verbosity": 3}})
    )["args"]
    assert "--traffic-metrics" in args
    assert "--v=3" in args
