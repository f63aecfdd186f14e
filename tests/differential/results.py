"""What one boot found: each difference with where it was seen, the services it concerns and
its explanation; the counts the report sums; the JSON the host reads."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from tests.differential.cluster import Cluster
from tests.differential.known import Context, explain, node_port_families
from tests.differential.normalise import Difference
from tests.differential.proxies import Profile
from tests.differential.topology import NODE_A, NODE_B, NODE_C

# kube-proxy's node's own addresses, and every address a Node object lists.
NODE_ADDRESSES = frozenset(
    (
        *NODE_A.interface_addresses(),
        *(a for n in (NODE_A, NODE_B, NODE_C) for a in (n.ipv4, n.ipv6)),
    )
)


@dataclass
class Found:
    """A difference, where it was seen and the services it concerns."""

    profile: str
    moment: str
    difference: Difference
    owners: tuple[str, ...] = ()
    # The deliberate difference it is (docs/kube-proxy-differences.md), or None.
    explained: str | None = None

    def __str__(self) -> str:
        owners = f" ({', '.join(self.owners)})" if self.owners else ""
        why = f"explained: {self.explained}" if self.explained else "UNEXPLAINED"
        return f"[{why}]{owners} {self.difference}"


def found_in(profile: Profile, moment: str, difference: Difference, cluster: Cluster) -> Found:
    """The difference with its services and its explanation, if it has one."""
    text = f"{difference.subject} {difference.kube_proxy} {difference.ours}"
    owners = cluster.owners.of(text)
    context = Context(
        cluster.owners.services,
        node_port_families(profile.nodeport_addresses, NODE_A),
        NODE_ADDRESSES,
    )
    return Found(profile.name, moment, difference, owners, explain(difference, owners, context))


@dataclass
class Results:
    scenarios: list[str] = field(default_factory=list)
    steps: int = 0
    compares: int = 0
    probes: int = 0
    found: list[Found] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "scenarios": self.scenarios,
            "steps": self.steps,
            "compares": self.compares,
            "probes": self.probes,
            "found": [
                {
                    "profile": f.profile,
                    "moment": f.moment,
                    "owners": list(f.owners),
                    "explained": f.explained,
                    **asdict(f.difference),
                }
                for f in self.found
            ],
            "errors": self.errors,
        }
