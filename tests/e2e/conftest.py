"""The e2e tier: one lab node, the real etcd and kube-apiserver beside it, pods, and the daemon.

The control plane (``tests/lab/controlplane.py``), the node and the API server's objects for
the nodes live for the whole session: the control plane starts once per boot, while the node
is set up. Pods and cluster objects belong to one test and go with it; a daemon belongs to a
package or a module (starting Python inside the lab costs seconds) and leaves no kernel state
behind: it stops with SIGTERM, then cleanup runs.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.lab.apiserver import ClusterApi, RealApiServer
from tests.lab.controlplane import LabControlPlane
from tests.lab.daemon import START_TIMEOUT, Daemon, cleaned_up
from tests.lab.guard import require_lab
from tests.lab.kernel_state import virtual_servers
from tests.lab.netns import Client, Node, Pod
from tests.lab.objects import node as node_object
from tests.lab.traffic import APPLY_TIMEOUT, wait_until

JsonObject = dict[str, Any]
CLUSTER_CIDRS = "10.244.0.0/16,fd00:10:244::/48"
# Clients "outside the pod network": namespaces with addresses outside CLUSTER_CIDRS.
OUTSIDE_CIDR = ipaddress.IPv4Network("10.250.0.0/24")
E2E_APISERVER_ARGS = (
    "--service-cluster-ip-range=10.96.0.0/16,fd00:10:96::/112",
    # Services are watched from etcd's history, not the watch cache, which a compaction does
    # not touch: so a compaction makes a Service watch from before it end in 410 Gone.
    "--watch-cache-sizes=services#0",
    # Only the tests compact, never the API server on its own (every 5 minutes by default).
    "--etcd-compaction-interval=0",
)


@pytest.fixture(autouse=True)
def _require_lab() -> None:
    require_lab("tests/e2e")


@pytest.fixture(scope="session")
def control_plane() -> Iterator[LabControlPlane]:
    """Started here, ready when ``api`` first needs it."""
    require_lab("tests/e2e")
    plane = LabControlPlane(apiserver_args=E2E_APISERVER_ARGS).start()
    yield plane
    plane.stop()


@pytest.fixture(scope="session")
def node(control_plane: LabControlPlane) -> Iterator[Node]:
    lab_node = Node()
    lab_node.set_up()
    yield lab_node
    lab_node.tear_down()


@pytest.fixture(scope="session")
def api(node: Node, control_plane: LabControlPlane) -> RealApiServer:
    server = RealApiServer(control_plane.ready())
    server.apply(
        node_object("node-a", str(node.ipv4), str(node.ipv6)),
        node_object("node-b", "10.240.0.11"),
    )
    return server


@pytest.fixture(scope="session")
def endpointslice_controller(api: RealApiServer) -> None:
    """The kube-controller-manager's EndpointSlice controller, for the rest of the session:
    Services with a selector get their EndpointSlices from the Pods the tests write. (The
    ServiceAccount admission refuses a Pod whose namespace has no default ServiceAccount,
    which no controller makes here.)"""
    api.apply({"kind": "ServiceAccount", "metadata": {"name": "default", "namespace": "default"}})
    api.control_plane.start_controller_manager("endpointslice")


@contextmanager
def running_daemon(
    api: ClusterApi, directory: Path, *flags: str, start_timeout: float = START_TIMEOUT
) -> Iterator[Daemon]:
    """A daemon for the block; afterwards it must exit 0 on SIGTERM, and the kernel is cleaned."""
    daemon = Daemon(
        api.kubeconfig, directory / "daemon.log", "--cluster-cidr", CLUSTER_CIDRS, *flags
    )
    with cleaned_up(daemon):
        yield daemon.start(start_timeout)


@pytest.fixture(scope="module")
def daemon(api: ClusterApi, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One daemon for a module that starts (and restarts) its own."""
    with running_daemon(api, tmp_path_factory.mktemp("daemon")) as running:
        yield running


class Pods:
    """Pods made by one test, each serving its name; removed with the test."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.made: list[Pod] = []
        self._outside = iter(OUTSIDE_CIDR.hosts())
        next(self._outside)  # .1 stays free, as a router's would be

    def __call__(self, name: str, *ports: int) -> Pod:
        return self._serving(self.node.add_pod(name), ports or (8080,))

    def outside(self, name: str) -> Pod:
        """A namespace routed through the node, with an address outside the pod network."""
        return self._serving(self.node.add_pod(name, next(self._outside)), ())

    def at(self, name: str, address: str, *ports: int) -> Pod:
        """A namespace at a chosen address (another node's, say), routed through the node."""
        return self._serving(self.node.add_pod(name, ipaddress.IPv4Address(address)), ports)

    def _serving(self, pod: Pod, ports: tuple[int, ...]) -> Pod:
        self.made.append(pod)
        for port in ports:
            pod.serve(port)
        return pod

    def remove(self, pod: Pod) -> None:
        self.made.remove(pod)
        self.node.remove_pod(pod)

    def remove_all(self) -> None:
        for pod in list(self.made):
            self.remove(pod)


@pytest.fixture
def pods(node: Node) -> Iterator[Pods]:
    made = Pods(node)
    yield made
    made.remove_all()


class Cluster:
    """The objects one test puts in the API; deleting them all brings the kernel back."""

    def __init__(self, api: ClusterApi) -> None:
        self.api = api
        self.applied: dict[tuple[str, str, str], JsonObject] = {}

    def apply(self, *objects: JsonObject) -> list[JsonObject]:
        """Each object as the API server stored it (with what it allocated)."""
        for obj in objects:
            metadata = obj["metadata"]
            self.applied[(obj["kind"], metadata.get("namespace", ""), metadata["name"])] = obj
        return self.api.apply(*objects)

    def delete(self, *objects: JsonObject) -> None:
        self.api.delete(*objects)

    def delete_all(self) -> None:
        self.api.delete(*self.applied.values())
        self.applied.clear()


@pytest.fixture
def cluster(api: ClusterApi) -> Iterator[Cluster]:
    """The test's objects; at teardown they go, and the kernel's virtual servers with them."""
    before = virtual_servers()
    objects = Cluster(api)
    yield objects
    objects.delete_all()
    wait_until(
        lambda: virtual_servers() <= before,
        APPLY_TIMEOUT,
        "the deleted services' virtual servers leave the kernel",
    )


@pytest.fixture
def client() -> Callable[[Pod | None], Client]:
    """A client in a pod's namespace, or on the node itself for None."""
    return lambda where: Client(where.namespace if where else None)
