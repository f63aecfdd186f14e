"""What the e2e tests write the cluster through: the real API server, or the api tier's fake.

Both take objects as the API sends them (``tests/lab/objects.py``) and hand a kubeconfig to
the proxy under test. ``RealApiServer`` writes to the lab's control plane (see
``controlplane.py``) with server-side apply and returns each object as the server stored it
(with the cluster IPs and node ports it allocated). ``LabApiServer`` is the fake, a thread of
the test process, kept for the faults a real server cannot be made to produce.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from tests.api.fake_apiserver import KINDS as FAKE_KINDS
from tests.api.fake_apiserver import FakeApiServer
from tests.api.kube import KINDS, Kube, path
from tests.controlplane.cluster import ApiError, ControlPlane

JsonObject = dict[str, Any]
_NOT_FOUND = 404


class ClusterApi(Protocol):
    """An API server the tests write objects to and the proxy reads them from."""

    @property
    def kubeconfig(self) -> Path: ...

    def apply(self, *objects: JsonObject) -> list[JsonObject]:
        """Create or replace each object, in order; each as the server stored it."""
        ...

    def delete(self, *objects: JsonObject) -> None:
        """Delete each object that exists, identified by kind, namespace and name."""
        ...


def _namespace(obj: JsonObject) -> str:
    namespace = obj["metadata"].get("namespace") or "default"
    return str(namespace) if KINDS[obj["kind"]].namespaced else ""


class RealApiServer:
    """The lab's kube-apiserver, written as the cluster's admin."""

    def __init__(self, control_plane: ControlPlane) -> None:
        self.control_plane = control_plane
        # Server-side apply into "default" unless an object names its namespace.
        self._kube = Kube(control_plane, "default", control_plane.folder)
        self._namespaces = {"default", "kube-system", "kube-public", "kube-node-lease"}

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.kubeconfig

    def apply(self, *objects: JsonObject) -> list[JsonObject]:
        """Server-side apply of each object (its namespace made first if need be), then of
        its status, if it has one; the objects as the server stored them."""
        return [self._apply(obj) for obj in objects]

    def _apply(self, obj: JsonObject) -> JsonObject:
        namespace = _namespace(obj)
        if namespace and namespace not in self._namespaces:
            self._kube.apply({"kind": "Namespace", "metadata": {"name": namespace}})
            self._namespaces.add(namespace)
        body = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
        status = body.pop("status", None)
        stored = self._kube.apply(body)
        if status:
            stored = self.apply_status(obj)
        return {**stored, "kind": obj["kind"]}

    def apply_status(self, obj: JsonObject) -> JsonObject:
        """Write ``obj``'s status (a Service's load balancer, a Pod's readiness), as its
        controller or kubelet would: a merge patch, lists replaced whole (server-side apply
        refuses a dual-stack Node's two InternalIP addresses, its lists being keyed by type)."""
        stored = self.control_plane.request(
            "PATCH",
            path(obj["kind"], _namespace(obj), obj["metadata"]["name"], "status"),
            {"status": obj["status"]},
            content_type="application/merge-patch+json",
        )
        return {**stored, "kind": obj["kind"]}

    def get(self, obj: JsonObject) -> JsonObject:
        """``obj`` as the server has it now."""
        stored = self._kube.get(obj["kind"], obj["metadata"]["name"], _namespace(obj))
        return {**stored, "kind": obj["kind"]}

    def delete(self, *objects: JsonObject, grace_seconds: int | None = None) -> None:
        """Delete each object that exists; ``grace_seconds`` as ``kubectl delete --grace-period``
        (a Pod on a node without a kubelet stays terminating for ever unless it is 0)."""
        query = "" if grace_seconds is None else f"?gracePeriodSeconds={grace_seconds}"
        for obj in objects:
            try:
                self.control_plane.request(
                    "DELETE", path(obj["kind"], _namespace(obj), obj["metadata"]["name"]) + query
                )
            except ApiError as error:
                if error.status != _NOT_FOUND:
                    raise

    def delete_in_storage(self, *objects: JsonObject) -> None:
        """Delete each object from etcd itself, as another API server of the cluster would
        while this one is down (a deletion is the removal of the object's key)."""
        for obj in objects:
            # The API server keeps Services under "services/specs", the rest under their plural.
            plural = KINDS[obj["kind"]].plural
            resource = "services/specs" if plural == "services" else plural
            namespace = _namespace(obj)
            key = "/".join(
                part for part in ("/registry", resource, namespace, obj["metadata"]["name"]) if part
            )
            assert self.control_plane.etcd_delete(key) == 1, f"etcd had no {key}"

    @contextmanager
    def outage(self, seconds: float) -> Iterator[None]:
        """The API server killed (every watch cut) and started again ``seconds`` later; the
        block runs meanwhile. (A graceful stop takes tens of seconds in the lab.)"""
        self.control_plane.stop_apiserver(signal.SIGKILL)
        back_at = time.monotonic() + seconds
        try:
            yield
        finally:
            time.sleep(max(0.0, back_at - time.monotonic()))
            self.control_plane.start_apiserver()


class LabApiServer:
    """The api tier's fake API server, serving on the lab's loopback for a proxy process.

    It runs as a thread of the test process; tests change the cluster through ``apply`` and
    ``delete``. Only for what a real API server cannot be made to send (objects its
    validation refuses, say).
    """

    def __init__(self, directory: Path) -> None:
        self.fake = FakeApiServer()
        self._kubeconfig = directory / "kubeconfig"

    @property
    def kubeconfig(self) -> Path:
        return self._kubeconfig

    def start(self) -> LabApiServer:
        self.fake.start()
        self.fake.write_kubeconfig(self._kubeconfig)
        return self

    def stop(self) -> None:
        self.fake.stop()

    def apply(self, *objects: JsonObject) -> list[JsonObject]:
        """Create or replace each object, in order (a watch sees them in this order)."""
        return [self.fake.apply(obj) for obj in objects]

    def delete(self, *objects: JsonObject) -> None:
        for obj in objects:
            metadata = obj["metadata"]
            namespace = (
                metadata.get("namespace", "default") if FAKE_KINDS[obj["kind"]].namespaced else ""
            )
            with contextlib.suppress(KeyError):
                self.fake.delete(obj["kind"], namespace, metadata["name"])
