"""An in-memory conntrack table, as ``NetlinkConntrack`` deletes from it."""

from __future__ import annotations

from collections.abc import Sequence

from ipvsproxy.kernel.conntrack import Flow, FlowTarget
from ipvsproxy.model import OpError


class FakeConntrack:
    """An in-memory conntrack table; tests seed it with ``add_flow``."""

    def __init__(self) -> None:
        self._flows: set[Flow] = set()

    def add_flow(self, flow: Flow) -> None:
        self._flows.add(flow)

    def flows(self) -> frozenset[Flow]:
        return frozenset(self._flows)

    def delete_entries(self, targets: Sequence[FlowTarget]) -> list[int | OpError]:
        doomed = [{flow for flow in self._flows if flow.target() == target} for target in targets]
        for flows in doomed:
            self._flows -= flows
        return [len(flows) for flows in doomed]
