"""The real control plane inside a lab boot: etcd and kube-apiserver beside the tests.

The lab kernel has no network link to this machine, so an API server that a lab test's proxy
reads runs in the same kernel, started once per boot (a session fixture) from the binaries
``tests/controlplane`` builds; ``tests.controlplane.cluster.ControlPlane`` runs it.

* Where it listens: ``ADDRESS``, on a dummy link of its own (``LINK``) in the lab's root
  namespace. The root namespace (the e2e node) has it as a local address; any other network
  namespace reaches it through a route to it (a pod's default route through the node does; a
  node namespace of its own needs ``ip route add ADDRESS via ...``). The API server's
  self-signed certificate names the address it binds, so TLS verifies from everywhere. Not
  loopback: the API server will not advertise a loopback address as the endpoint of the
  ``kubernetes`` Service, and a namespace could not reach it there.
* Its binaries are copied into /run (a tmpfs in the lab) first: run from the host's file
  system, each page of a 120 MB executable is read across hostfs when first touched.
* ``start`` returns at once and the control plane starts in a thread while the caller sets up
  the rest of the boot; ``ready`` waits for it.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Sequence
from pathlib import Path

from tests.controlplane.build import LOCATION_VARIABLE, located
from tests.controlplane.cluster import START_TIMEOUT, ControlPlane
from tests.lab.netns import ip_batch

LINK = "kube-api0"
ADDRESS = "10.240.255.1"
FOLDER = Path("/run/ipvsproxy-controlplane")
# What the lab's control plane runs, of the binaries tests/controlplane builds.
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")


def lab_binaries(source: Path, target: Path, names: Sequence[str] = BINARIES) -> Path:
    """Copies of ``names`` from ``source`` in ``target`` (a folder on the lab's tmpfs)."""
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy2(source / name, target / name)
    return target


class LabControlPlane:
    """etcd and kube-apiserver in this lab boot, serving on ``address``."""

    def __init__(
        self,
        *,
        address: str = ADDRESS,
        folder: Path = FOLDER,
        apiserver_args: Sequence[str] = (),
    ) -> None:
        source = located()
        if source is None:
            raise RuntimeError(
                "the control plane is not built: run `nox -s controlplane` (or set "
                f"{LOCATION_VARIABLE}) before the lab boots"
            )
        self.address = address
        self._source = source
        self._folder = folder
        self._apiserver_args = tuple(apiserver_args)
        self._control_plane: ControlPlane | None = None
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._start, name="control-plane", daemon=True)

    def start(self) -> LabControlPlane:
        """Put the address on its link, then start the control plane in the background."""
        ip_batch(
            [
                f"link add {LINK} type dummy",
                f"link set {LINK} up",
                f"addr add {self.address}/32 dev {LINK}",
            ]
        )
        self._thread.start()
        return self

    def _start(self) -> None:
        try:
            control_plane = ControlPlane(
                lab_binaries(self._source, self._folder / "bin"),
                self._folder / "data",
                address=self.address,
                apiserver_args=self._apiserver_args,
            )
            self._control_plane = control_plane
            control_plane.start()
        except BaseException as error:  # handed to whoever waits in ready()
            self._failure = error

    def ready(self, timeout: float = 2 * START_TIMEOUT) -> ControlPlane:
        """The control plane, once its API server answers /readyz; its failure, raised."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the lab's control plane did not start within {timeout:g} s")
        if self._failure is not None:
            raise RuntimeError(f"the lab's control plane did not start: {self._failure}")
        assert self._control_plane is not None
        return self._control_plane

    def stop(self) -> None:
        self._thread.join(START_TIMEOUT)
        if self._control_plane is not None:
            self._control_plane.stop()
        ip_batch([f"link del {LINK}"])
