"""Two services claiming one virtual server: which keeps it, and the warning for the other.

Conflicts are settled per virtual server, never per service, so a tenant who writes another
service's address into its own externalIPs loses that one virtual server and takes nothing
from the other service (the attack class of CVE-2020-8554). An address the API server
allocates and keeps unique (a cluster IP, a node port) wins over one a user writes
(externalIPs, load-balancer ingress); between equals the older service wins, then the first
by name, so a newcomer never displaces what is already served. Node ports are settled the same
way, per port of the node (``node_ports``), all of them allocated by the API server.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from ipvsproxy.frozen_init import quick_init
from ipvsproxy.model import AddressKind, ObjectKey, Rejection, SkipReason, VirtualServerKey
from ipvsproxy.translate.node_ports import NodePortKey, PortUse

API_ALLOCATED = frozenset(
    {AddressKind.CLUSTER_IP, AddressKind.NODE_PORT, PortUse.NODE_PORT, PortUse.HEALTH_CHECK}
)
# Sorts after every RFC 3339 time: a service of unknown age counts as the newest.
_UNKNOWN_AGE = "~"

T = TypeVar("T")
# What is claimed: a virtual server, or a port of the node.
Contested = VirtualServerKey | NodePortKey
K = TypeVar("K", bound=Contested)


@quick_init
@dataclass(frozen=True, slots=True)
class Claim:
    service: ObjectKey
    created: str  # metadata.creationTimestamp, "" when unknown
    kind: AddressKind | PortUse

    def rank(self) -> tuple[bool, str, str]:
        """Lower wins."""
        return (self.kind not in API_ALLOCATED, self.created or _UNKNOWN_AGE, str(self.service))


def _why(winner: Claim, loser: Claim) -> str:
    if (winner.kind in API_ALLOCATED) != (loser.kind in API_ALLOCATED):
        return "an address the API server allocates wins over one a user writes"
    if winner.created != loser.created:
        return "the older service wins"
    return "the first by name wins between services of the same age"


def conflict(key: Contested, winner: Claim, loser: Claim) -> Rejection:
    return Rejection(
        f"Service {loser.service}",
        f"{key} ({loser.kind}) is also Service {winner.service}'s ({winner.kind}); "
        f"{winner.service} keeps it, as {_why(winner, loser)}",
        SkipReason.ADDRESS_CONFLICT,
    )


def settle(key: Contested, claims: Iterable[Claim]) -> tuple[Claim, list[Rejection]]:
    """The winning claim, and each other claim's rejection naming that winner, in rank order."""
    winner, *losers = sorted(claims, key=Claim.rank)
    return winner, [conflict(key, winner, loser) for loser in losers]
