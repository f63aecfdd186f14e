"""Traffic verdicts: the same clients send the same requests to both nodes.

A probe is a client (outside the cluster, a pod, the node itself), a service address (a
cluster IP, a NodePort on the node's primary or second NIC, an external IP, a load-balancer
IP) and a port. Its verdict on a node is what answered, in the mirrored node's terms ("own
pod 1", "other node's pod 2", "own host"), or how it failed (refused, dropped). Each node's
twin client asks its own node, so the verdicts of kube-proxy's node and ours must be equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.differential.cluster import Cluster, Ref
from tests.differential.topology import NodeLayout
from tests.lab.netns import Client, ask
from tests.lab.traffic import UdpConversation

JsonObject = dict[str, Any]
TIMEOUT = 2.0


@dataclass(frozen=True)
class Probe:
    name: str
    client: str  # "outside", "pod" or "node"
    service: str  # "NAMESPACE/NAME"
    target: str  # "cluster-ip", "node-port", "node-port-nic", "external-ip", "load-balancer"
    port: int | None = None  # instead of the service's (a host port on a service address)
    protocol: str = "TCP"
    attempts: int = 5
    after: tuple[str, ...] = ("add", "scale")


def _client(node: NodeLayout, kind: str) -> Client:
    namespace = {
        "outside": node.client_namespace,
        "pod": node.pod_namespace(1),
        "node": node.namespace,
    }[kind]
    return Client(namespace, timeout=TIMEOUT)


def _address(node: NodeLayout, probe: Probe, service: JsonObject) -> tuple[str, int]:
    spec, status = service["spec"], service.get("status", {})
    first = next(p for p in spec["ports"] if p["protocol"] == probe.protocol)
    number = first["port"]
    if probe.target == "cluster-ip":
        address = spec["clusterIP"]
    elif probe.target == "external-ip":
        address = spec["externalIPs"][0]
    elif probe.target == "load-balancer":
        address = status["loadBalancer"]["ingress"][0]["ip"]
    else:
        address = node.ipv4 if probe.target == "node-port" else node.secondary_ipv4
        number = first["nodePort"]
    return address, probe.port or number


def _answer(node: NodeLayout, text: str) -> str:
    """A pod's or host's name in the mirrored node's terms."""
    own = node.name[-1]
    if text.startswith("host-"):
        return "own host" if text.endswith(own) else "other host"
    return f"{'own' if text[:1] == own else 'other'} pod {text[1:]}"


def _once(client: Client, address: str, port: int, protocol: str) -> str:
    if protocol == "UDP":
        return UdpConversation(client, address, port).ask_once()
    with client.connect(address, port) as sock:
        return ask(sock)


def verdict(cluster: Cluster, node: NodeLayout, probe: Probe) -> str:
    namespace, name = probe.service.split("/")
    service = cluster.get(Ref("Service", namespace, name))
    if service is None:
        return "no such service"
    address, port = _address(node, probe, service)
    client = _client(node, probe.client)
    outcomes: set[str] = set()
    for _ in range(probe.attempts):
        try:
            outcomes.add(_answer(node, _once(client, address, port, probe.protocol)))
        except TimeoutError:
            outcomes.add("dropped")
            break
        except ConnectionRefusedError:
            outcomes.add("refused")
            break
        except OSError as error:
            outcomes.add(type(error).__name__)
            break
    return ", ".join(sorted(outcomes))
