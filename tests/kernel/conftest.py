"""Fixtures for the lab tier: a node, pods, and clients inside the User-Mode Linux kernel."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest

from tests.lab import IN_LAB, UNAVAILABLE_REASON
from tests.lab.netns import Client, Node, Pod


@pytest.fixture(autouse=True)
def _require_lab() -> None:
    if IN_LAB:
        return
    reason = UNAVAILABLE_REASON or "lab tests run inside the lab: python -m tests.lab tests/kernel"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the lab did not run: {reason}")
    pytest.skip(reason)


@pytest.fixture
def node() -> Iterator[Node]:
    lab_node = Node()
    lab_node.set_up()
    yield lab_node
    lab_node.tear_down()


@pytest.fixture
def pod(node: Node) -> Callable[[str], Pod]:
    """Make a pod serving TCP and UDP on 8080 that answers with its name."""

    def make(name: str) -> Pod:
        new_pod = node.add_pod(name)
        new_pod.serve(8080)
        return new_pod

    return make


@pytest.fixture
def client() -> Callable[[Pod | None], Client]:
    """A client in a pod's namespace, or on the node itself for None."""
    return lambda where: Client(where.namespace if where else None)
