"""CPU time to parse and translate 10,000 services with 100,000 endpoints from API JSON.

A report, not a test: run ``python bench/translate_bench.py`` and read the figures.
"""

from __future__ import annotations

import time
from typing import Any

from ipvsproxy.cluster.parse import snapshot_from_objects
from ipvsproxy.translate import Settings, translate

SERVICES = 10_000
ENDPOINTS_PER_SERVICE = 10
NODES = 100


def pod_ip(number: int) -> str:
    """A distinct address per pod, as a cluster has: no parse is shared between endpoints."""
    return f"10.{128 + number // 65536}.{number // 256 % 256}.{number % 256}"


def cluster_objects() -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [
        {
            "kind": "Node",
            "metadata": {"name": "node-0"},
            "status": {"addresses": [{"type": "InternalIP", "address": "192.168.0.1"}]},
        }
    ]
    for index in range(SERVICES):
        name = f"svc-{index}"
        node_port = 30000 + index // 10
        objects.append(
            {
                "kind": "Service",
                "metadata": {"name": name, "namespace": f"ns-{index % 50}"},
                "spec": {
                    "type": "NodePort" if index % 10 == 0 else "ClusterIP",
                    "clusterIPs": [f"10.{96 + index // 65536}.{index // 256 % 256}.{index % 256}"],
                    "ports": [
                        {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}
                        | ({"nodePort": node_port} if index % 10 == 0 else {})
                    ],
                },
            }
        )
        objects.append(
            {
                "kind": "EndpointSlice",
                "metadata": {
                    "name": f"{name}-abcde",
                    "namespace": f"ns-{index % 50}",
                    "labels": {"kubernetes.io/service-name": name},
                },
                "addressType": "IPv4",
                "endpoints": [
                    {
                        "addresses": [pod_ip(index * ENDPOINTS_PER_SERVICE + n)],
                        "conditions": {"ready": True, "serving": True, "terminating": False},
                        "nodeName": f"node-{(index + n) % NODES}",
                    }
                    for n in range(ENDPOINTS_PER_SERVICE)
                ],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            }
        )
    return objects


def main() -> None:
    objects = cluster_objects()
    start = time.process_time()
    snapshot, rejections = snapshot_from_objects(objects, "node-0")
    parsed = time.process_time()
    state = translate(snapshot, Settings())
    done = time.process_time()
    real_servers = sum(len(vs.real_servers) for vs in state.virtual_servers.values())
    print(
        f"{len(snapshot.services)} services, {real_servers} real servers, "
        f"{len(state.virtual_servers)} virtual servers, "
        f"{len(rejections) + len(state.rejections)} rejections"
    )
    print(
        f"parse {parsed - start:.2f} s CPU, translate {done - parsed:.2f} s CPU, "
        f"total {done - start:.2f} s CPU"
    )


if __name__ == "__main__":
    main()
