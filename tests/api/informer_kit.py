"""ClusterInformer with what only tests do to it."""

from __future__ import annotations

from ipvsproxy.cluster.informer import ClusterInformer
from ipvsproxy.model import ClusterSnapshot, Rejection


class PeekingInformer(ClusterInformer):
    """A ClusterInformer whose snapshot tests can look at again and again: unlike
    ``take_snapshot``, ``snapshot`` leaves the touched keys for the next ``take_snapshot``."""

    def snapshot(self) -> tuple[ClusterSnapshot, list[Rejection]]:
        return self._snapshot(self.services.items(), self.endpoint_slices.items())
