"""Random Service, EndpointSlice and Node changes against both proxies (a hypothesis state
machine); an unexplained difference fails, and hypothesis shrinks the steps that led to it.

Each rule is a batch of changes, then one sync of both proxies and a comparison: a sync of
kube-proxy costs seconds in the lab whatever it changes, so changes go in batches. Services
live in a few slots of one namespace; each slot has external and load-balancer IPs of its own
(contested virtual servers are a named scenario's business, not this one's), endpoints are
twins or remote (so the two nodes stay mirrored), and both nodes carry the same zone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from tests.controlplane.cluster import ApiError
from tests.differential.cluster import Cluster, JsonObject, Ref, ref
from tests.differential.objects import endpoint, endpoint_slice, port, service, slice_port
from tests.differential.topology import NODE_A, NODE_B, NODE_C

NAMESPACE = "random"
SLOTS = 6
SLICES_PER_SLOT = 2  # one per family
PORTS = (
    ("a", 80, "TCP"),
    ("b", 53, "UDP"),
    ("c", 9000, "SCTP"),
    ("d", 8443, "TCP"),
)


@dataclass
class Progress:
    """What the run has done so far, shared with the caller across examples."""

    steps: int = 0
    batches: int = 0
    refused: int = 0
    # Reached, no new example touches the cluster.
    target: int = 0
    # How long hypothesis may shrink a failure against the cluster; past it, its attempts
    # touch nothing (and so pass), and it reports the smallest failure found so far.
    shrink_budget: float = float("inf")
    # When the first unexplained difference was found (hypothesis shrinks it from then on).
    failed_at: float | None = None

    def active(self) -> bool:
        if self.failed_at is not None:
            return time.monotonic() < self.failed_at + self.shrink_budget
        return self.steps < self.target

    def fail(self) -> None:
        if self.failed_at is None:
            self.failed_at = time.monotonic()


# -- what a change is --------------------------------------------------------------------------


def _families(slot: int, dual: bool) -> tuple[str, ...]:
    primary = "IPv6" if slot % 3 == 2 else "IPv4"
    other = "IPv4" if primary == "IPv6" else "IPv6"
    return (primary, other) if dual else (primary,)


@st.composite
def services(draw: st.DrawFn, slot: int) -> JsonObject:
    kind = draw(st.sampled_from(["ClusterIP", "NodePort", "LoadBalancer"]))
    dual = draw(st.booleans())
    families = _families(slot, dual)
    names = draw(st.lists(st.sampled_from(PORTS), min_size=1, max_size=2, unique_by=lambda p: p[0]))
    ports = [port(number, protocol, name=name) for name, number, protocol in names]
    spec: dict[str, Any] = {}
    if draw(st.booleans()):
        spec["sessionAffinity"] = "ClientIP"
        spec["sessionAffinityConfig"] = {
            "clientIP": {"timeoutSeconds": draw(st.sampled_from([10, 10800]))}
        }
    if draw(st.booleans()):
        spec["internalTrafficPolicy"] = "Local"
    if kind != "ClusterIP" and draw(st.booleans()):
        spec["externalTrafficPolicy"] = "Local"
    external = draw(
        st.lists(st.sampled_from(_external_ips(slot, families)), max_size=2, unique=True)
    )
    if external:
        spec["externalIPs"] = external
    ingress: tuple[str, ...] = ()
    if kind == "LoadBalancer":
        ingress = tuple(
            draw(st.lists(st.sampled_from(_ingress_ips(slot, families)), max_size=2, unique=True))
        )
        ranges = draw(
            st.lists(
                st.sampled_from(
                    ["10.250.0.0/24", "10.252.0.2/32", "192.0.2.0/24", "fd00:252::/64"]
                ),
                max_size=2,
                unique=True,
            )
        )
        if ranges:
            spec["loadBalancerSourceRanges"] = ranges
        if draw(st.booleans()):
            spec["allocateLoadBalancerNodePorts"] = False
    return service(
        NAMESPACE, f"s{slot}", ports, kind=kind, families=families, ingress=ingress, **spec
    )


def _external_ips(slot: int, families: tuple[str, ...]) -> list[str]:
    found = [f"203.0.114.{4 * slot + k}" for k in range(2)] if "IPv4" in families else []
    return found + (
        [f"2001:db8:4::{4 * slot + k:x}" for k in range(2)] if "IPv6" in families else []
    )


def _ingress_ips(slot: int, families: tuple[str, ...]) -> list[str]:
    found = [f"198.51.101.{4 * slot + k}" for k in range(2)] if "IPv4" in families else []
    return found + (
        [f"2001:db8:5::{4 * slot + k:x}" for k in range(2)] if "IPv6" in families else []
    )


# (ready, serving, terminating)
CONDITIONS = ((True, True, False), (False, False, False), (False, True, True), (False, False, True))


@st.composite
def slices(draw: st.DrawFn, slot: int, index: int) -> JsonObject:
    # A slice's address type is immutable: each slot has one slice per family.
    family = ("IPv4", "IPv6")[index]
    endpoints: list[JsonObject] = []
    hinted = draw(st.sampled_from([None, "zone", "node"]))
    for number in draw(st.lists(st.integers(1, 4), max_size=4, unique=True)):
        ready, serving, terminating = draw(st.sampled_from(CONDITIONS))
        placement = draw(st.sampled_from(["twins", "remote"]))
        # Drawn once for both twins, so the two nodes stay mirrored.
        zone = draw(st.sampled_from(["zone-1", "zone-2"])) if hinted == "zone" else None
        for node in (NODE_A, NODE_B) if placement == "twins" else (NODE_C,):
            endpoints.append(
                endpoint(
                    node,
                    number,
                    family,
                    ready=ready,
                    serving=serving,
                    terminating=terminating,
                    for_zones=(zone,) if zone else None,
                    for_nodes=(node.name,) if hinted == "node" and node is not NODE_C else None,
                )
            )
    names = draw(st.lists(st.sampled_from(PORTS), min_size=1, max_size=3, unique_by=lambda p: p[0]))
    ports = [slice_port(8080 + i, protocol, name) for i, (name, _, protocol) in enumerate(names)]
    return endpoint_slice(
        NAMESPACE, f"s{slot}", endpoints, ports, family=family, name=f"s{slot}-{index}"
    )


@dataclass(frozen=True)
class Change:
    """One step: an object applied, or deleted."""

    description: str
    apply: JsonObject | None = None
    delete: Ref | None = None


def changes() -> st.SearchStrategy[Change]:
    slot = st.integers(0, SLOTS - 1)
    index = st.integers(0, SLICES_PER_SLOT - 1)
    upsert_service = slot.flatmap(
        lambda s: services(s).map(lambda obj: Change(f"service s{s}: {_brief(obj)}", apply=obj))
    )
    upsert_slice = st.tuples(slot, index).flatmap(
        lambda si: slices(*si).map(
            lambda obj: Change(f"slice {obj['metadata']['name']}", apply=obj)
        )
    )
    delete_service = slot.map(
        lambda s: Change(f"delete service s{s}", delete=Ref("Service", NAMESPACE, f"s{s}"))
    )
    delete_slice = st.tuples(slot, index).map(
        lambda si: Change(
            f"delete slice s{si[0]}-{si[1]}",
            delete=Ref("EndpointSlice", NAMESPACE, f"s{si[0]}-{si[1]}"),
        )
    )
    zone = st.sampled_from(["zone-1", "zone-2"]).map(
        lambda z: Change(f"nodes in {z}", apply={"kind": "Zone", "zone": z})
    )
    return st.one_of(
        upsert_service, upsert_service, upsert_slice, upsert_slice, upsert_slice,
        delete_service, delete_slice, zone,
    )  # fmt: skip


def _brief(obj: JsonObject) -> str:
    spec = obj["spec"]
    ports = ",".join(f"{p['port']}/{p['protocol']}" for p in spec["ports"])
    extras = [
        k for k in ("externalIPs", "loadBalancerSourceRanges", "sessionAffinity") if k in spec
    ]
    policies = [
        f"{k}={spec[k]}" for k in ("internalTrafficPolicy", "externalTrafficPolicy") if k in spec
    ]
    return " ".join([spec["type"], "/".join(spec["ipFamilies"]), ports, *policies, *extras])


# -- the machine ------------------------------------------------------------------------------

# Set by ``run``: the cluster, and one sync-and-compare of both proxies returning the
# (difference text, explanation) of every difference.
Compare = Callable[[str], list[tuple[str, str | None]]]


class _Context:
    cluster: Cluster
    compare: Compare
    progress: Progress
    # Each object's resourceVersion as last written: whether a write changed it.
    versions: ClassVar[dict[Ref, str]] = {}


def _apply(change: Change) -> bool | None:
    """Make the change: True when the cluster changed, False when it already was so, None
    when the API server refused it."""
    cluster, versions = _Context.cluster, _Context.versions
    try:
        if change.delete is not None:
            versions.pop(change.delete, None)
            return cluster.delete(change.delete)
        assert change.apply is not None
        if change.apply["kind"] == "Zone":
            nodes = [
                node.node_object(zone=change.apply["zone"]) for node in (NODE_A, NODE_B, NODE_C)
            ]
            applied = [cluster.apply(node) for node in nodes]
        else:
            applied = [cluster.apply(change.apply)]
    except ApiError as error:
        if error.status not in (409, 422):
            raise
        return None
    changed = False
    for obj in applied:
        key, version = ref(obj), obj["metadata"]["resourceVersion"]
        changed |= versions.get(key) != version
        versions[key] = version
    return changed


class DifferentialMachine(RuleBasedStateMachine):
    @initialize()
    def clean_start(self) -> None:
        # Past the target (or the time), examples still come and do nothing, quickly.
        self.active = _Context.progress.active()
        self.steps: list[str] = []

    # About 25 changes a batch (a kube-proxy sync costs the same for one): shrinking turns
    # the ones a failure does not need into deletes of nothing, which change nothing.
    @rule(batch=st.lists(changes(), min_size=20, max_size=30))
    def change_then_compare(self, batch: list[Change]) -> None:
        progress = _Context.progress
        if not (self.active and progress.active()):
            return
        made = len(self.steps)
        # Node changes first: their watch is not ordered with the marker's, and the rest of
        # the batch leaves both proxies time to take them before the marker comes.
        for change in sorted(batch, key=lambda c: c.apply is None or c.apply["kind"] != "Zone"):
            # A step is a change the cluster made: a write of what is already there, or a
            # delete of nothing, is not counted.
            outcome = _apply(change)
            if outcome:
                self.steps.append(change.description)
                progress.steps += 1
            elif outcome is None:
                progress.refused += 1
        if len(self.steps) == made:
            # Nothing changed since the last comparison. Hypothesis' first examples are its
            # simplest, one write again and again: each sync they waited for cost a minute.
            return
        progress.batches += 1
        found = _Context.compare(f"random batch {progress.batches}")
        unexplained = [text for text, why in found if why is None]
        if unexplained:
            # From now on hypothesis shrinks it: its replays must touch the cluster.
            progress.fail()
            print("differential: the random steps so far:\n  " + "\n  ".join(self.steps))
        assert not unexplained, (
            "unexplained differences after:\n  "
            + "\n  ".join(self.steps)
            + "\n"
            + "\n".join(unexplained)
        )

    def teardown(self) -> None:
        # An example that changed nothing left the cluster as clean as it found it.
        if not getattr(self, "active", False) or not getattr(self, "steps", None):
            return
        for slot in range(SLOTS):
            for index in range(SLICES_PER_SLOT):
                _Context.cluster.delete(Ref("EndpointSlice", NAMESPACE, f"s{slot}-{index}"))
            _Context.cluster.delete(Ref("Service", NAMESPACE, f"s{slot}"))
        _apply(Change("nodes in zone-1", apply={"kind": "Zone", "zone": "zone-1"}))
        _Context.versions.clear()
        found = _Context.compare("random teardown")
        unexplained = [text for text, why in found if why is None]
        if unexplained:
            _Context.progress.fail()
        assert not unexplained, "unexplained differences once all was deleted:\n" + "\n".join(
            unexplained
        )


def run(
    cluster: Cluster, compare: Compare, target_steps: int, budget: float, progress: Progress
) -> None:
    """Examples until ``target_steps`` changes are made, counted in ``progress`` (also when
    this raises); an unexplained difference raises, with hypothesis' shrunk steps in the
    message. Shrinking stops touching the cluster ``budget`` seconds after the failure."""
    _Context.cluster, _Context.compare, _Context.progress = cluster, compare, progress
    progress.target, progress.shrink_budget = target_steps, budget
    run_state_machine_as_test(
        DifferentialMachine,
        settings=settings(
            # Enough for any target: once it is reached, the rest are no-ops.
            max_examples=max(20, target_steps // 10),
            stateful_step_count=10,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        ),
    )
