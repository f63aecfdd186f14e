"""Synthetic clusters for the benchmark: N services, each with one EndpointSlice of 10 endpoints.

Every service and pod gets an address of its own (no parse is shared between objects, as in a
real cluster), one in ten services is a NodePort, and the objects are the API's JSON, so the
manifest reads like ``kubectl get services,endpointslices,nodes -A -o json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ENDPOINTS_PER_SERVICE = 10
NODES = 100
NODE_NAME = "node-0"
NODE_ADDRESS = "192.168.0.1"


def cluster_ip(index: int) -> str:
    return f"10.{96 + index // 65536}.{index // 256 % 256}.{index % 256}"


def pod_ip(number: int) -> str:
    return f"10.{128 + number // 65536}.{number // 256 % 256}.{number % 256}"


def node_object() -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {"name": NODE_NAME},
        "status": {"addresses": [{"type": "InternalIP", "address": NODE_ADDRESS}]},
    }


def service_object(
    index: int, name: str | None = None, node_port: bool | None = None
) -> dict[str, Any]:
    node_port = index % 10 == 0 if node_port is None else node_port
    port: dict[str, Any] = {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}
    if node_port:
        port["nodePort"] = 30000 + index // 10 % 2768
    return {
        "kind": "Service",
        "metadata": {"name": name or f"svc-{index}", "namespace": f"ns-{index % 50}"},
        "spec": {
            "type": "NodePort" if node_port else "ClusterIP",
            "clusterIPs": [cluster_ip(index)],
            "ports": [port],
        },
    }


def endpoint_slice_object(
    index: int, name: str | None = None, first_pod: int | None = None
) -> dict[str, Any]:
    """The slice of service ``index``; ``first_pod`` moves its endpoints to other pods."""
    service = name or f"svc-{index}"
    first = index * ENDPOINTS_PER_SERVICE if first_pod is None else first_pod
    return {
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{service}-abcde",
            "namespace": f"ns-{index % 50}",
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "endpoints": [
            {
                "addresses": [pod_ip(first + n)],
                "conditions": {"ready": True, "serving": True, "terminating": False},
                "nodeName": f"node-{(index + n) % NODES}",
            }
            for n in range(ENDPOINTS_PER_SERVICE)
        ],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }


def cluster_objects(services: int) -> list[dict[str, Any]]:
    objects = [node_object()]
    for index in range(services):
        objects += [service_object(index), endpoint_slice_object(index)]
    return objects


def as_list(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": objects}


def write_manifest(path: Path, services: int) -> Path:
    path.write_text(json.dumps(as_list(cluster_objects(services))))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description="Write cluster-N.json manifests.")
    parser.add_argument("--sizes", default="1000,5000,10000")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for size in args.sizes.split(","):
        print(write_manifest(args.out / f"cluster-{int(size)}.json", int(size)))


if __name__ == "__main__":
    main()
