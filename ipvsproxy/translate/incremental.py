"""The desired state kept from one sync to the next, updated by the services that changed.

``translate`` reads the whole snapshot. The daemon knows which Services and EndpointSlices
changed, so this keeps what ``translate`` merges — every claim on each virtual server, each
winner's ipset entries and address (reference-counted: services and virtual servers share
entries), each service's rejections — and replaces only the changed services' shares. A
virtual server whose winner goes away passes to the best remaining claim, as ``translate``
would settle it. The result equals ``translate`` of the same snapshot (a property test holds
it to that), and comes with the ``DesiredChange`` against the previous result, so that a sync
after one change costs that change, not the cluster. Node ports are settled the same way, one
level up: a service holds a NodePort's virtual servers only while it holds the node port, so a
node port that passes to another service (or to a health check) settles its virtual servers
again.

Not thread-safe; an exception in ``update`` leaves the state unusable until ``rebuild``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Generic, TypeVar

from ipvsproxy.frozen_init import quick_init
from ipvsproxy.gcpause import without_cyclic_gc
from ipvsproxy.model import (
    TRAFFIC_POLICY_SCOPES,
    ClusterSnapshot,
    DesiredChange,
    DesiredState,
    DesiredVirtualServer,
    EndpointSlice,
    IPAddress,
    IPSetContent,
    IptablesRuleset,
    ObjectKey,
    Rejection,
    Service,
    TransportProtocol,
    VirtualServerKey,
)
from ipvsproxy.persistent import PersistentMap, PersistentSet
from ipvsproxy.translate.conflicts import Claim, settle
from ipvsproxy.translate.endpoints import AddressCache
from ipvsproxy.translate.ipsets import (
    SPECS,
    Member,
    bound_address_member,
    hairpin_member,
    health_check_member,
    virtual_server_members,
)
from ipvsproxy.translate.iptables import build_iptables
from ipvsproxy.translate.node import NodeFacts, node_facts
from ipvsproxy.translate.node_ports import NodePortKey, PortUse
from ipvsproxy.translate.settings import Settings
from ipvsproxy.translate.translate import (
    ServiceCache,
    ServiceState,
    health_check_families,
    holds_node_port,
    on_node,
    proxied,
    translate_service,
    unhandled_slice,
)

K = TypeVar("K", bound=Hashable)


class _Counted(Generic[K]):
    """Reference counts, and once ``track`` is called, for the items that came or went since
    ``delta``, whether each was there before (a rebuild needs no such record)."""

    def __init__(self) -> None:
        self.counts: dict[K, int] = {}
        self._before: dict[K, bool] | None = None

    def track(self) -> None:
        self._before = {}

    def add(self, item: K) -> None:
        count = self.counts.get(item, 0)
        if not count and self._before is not None:
            self._before.setdefault(item, False)
        self.counts[item] = count + 1

    def remove(self, item: K) -> None:
        count = self.counts[item]
        if count == 1:
            del self.counts[item]
            if self._before is not None:
                self._before.setdefault(item, True)
        else:
            self.counts[item] = count - 1

    def delta(self) -> tuple[frozenset[K], frozenset[K]]:
        """What came and what went since the last call (or ``track``)."""
        before, now = self._before or {}, self.counts
        came = frozenset(item for item, was in before.items() if not was and item in now)
        went = frozenset(item for item, was in before.items() if was and item not in now)
        self._before = {}
        return came, went


def _drop_claim(claims: dict[K, dict[ObjectKey, Claim]], key: K, service: ObjectKey) -> None:
    """The service's claim on ``key`` is withdrawn; a key nobody claims is forgotten."""
    held = claims[key]
    del held[service]
    if not held:
        del claims[key]


@quick_init
@dataclass(frozen=True, slots=True)
class _Share:
    """What one service brings, whichever virtual servers it wins."""

    state: ServiceState | None  # None: rejected whole
    # Its hairpin entries.
    members: tuple[Member, ...]


@quick_init
@dataclass(frozen=True, slots=True)
class _Won:
    """What one virtual server brings while its winner holds it."""

    wanted: DesiredVirtualServer
    members: tuple[Member, ...]
    on_node: bool
    blocks_node: bool  # a firewall that leaves the node out: an iptables rule


@dataclass(frozen=True, slots=True)
class _Published:
    """The big containers of the last desired state, shared with the next one's."""

    servers: PersistentMap[VirtualServerKey, DesiredVirtualServer]
    bound: PersistentSet[IPAddress]
    nodes: PersistentSet[IPAddress]
    entries: Mapping[str, PersistentSet[str]]


@quick_init
@dataclass(frozen=True, slots=True)
class Translated:
    desired: DesiredState
    # Against the previous ``desired``.
    change: DesiredChange


class IncrementalTranslation:
    def __init__(self, settings: Settings, cache: ServiceCache | None = None) -> None:
        self._settings = settings
        self._cache = cache if cache is not None else ServiceCache()
        self._reset(None, MappingProxyType({}))

    def _reset(self, node: NodeFacts | None, nodes_by_address: Mapping[IPAddress, str]) -> None:
        self._node = node
        self._nodes_by_address = nodes_by_address
        self._desired: DesiredState | None = None
        self._published = _Published(PersistentMap(), PersistentSet(), PersistentSet(), {})
        self._slices: dict[ObjectKey, dict[ObjectKey, EndpointSlice]] = {}
        self._slice_owners: dict[ObjectKey, ObjectKey] = {}
        self._slice_rejections: dict[ObjectKey, Rejection] = {}
        self._shares: dict[ObjectKey, _Share] = {}
        self._service_rejections: dict[ObjectKey, tuple[Rejection, ...]] = {}
        self._claims: dict[VirtualServerKey, dict[ObjectKey, Claim]] = {}
        self._conflicts: dict[VirtualServerKey, list[Rejection]] = {}
        self._port_claims: dict[NodePortKey, dict[ObjectKey, Claim]] = {}
        self._port_conflicts: dict[NodePortKey, list[Rejection]] = {}
        self._port_holders: dict[NodePortKey, ObjectKey] = {}
        # The services whose health check holds its port: the port, and its ipset entries.
        self._health_held: dict[ObjectKey, tuple[int, tuple[Member, ...]]] = {}
        self._won: dict[VirtualServerKey, _Won] = {}
        self._servers_before: dict[VirtualServerKey, DesiredVirtualServer | None] = {}
        self._entries: dict[str, _Counted[str]] = {name: _Counted() for name in SPECS}
        self._bound: _Counted[IPAddress] = _Counted()
        self._nodes: _Counted[IPAddress] = _Counted()
        self._blocked: set[VirtualServerKey] = set()
        self._health_checks: dict[ObjectKey, int] = {}
        self._no_local = dict.fromkeys(TRAFFIC_POLICY_SCOPES, 0)
        self._rejections_changed = self._blocked_changed = self._health_checks_changed = True

    @property
    def desired(self) -> DesiredState | None:
        return self._desired

    @without_cyclic_gc
    def rebuild(self, snapshot: ClusterSnapshot) -> DesiredState:
        """Forget everything and translate the whole snapshot."""
        node = node_facts(snapshot, self._settings)
        self._reset(node, snapshot.nodes_by_address)
        self._cache.begin(node, self._settings, snapshot.services, snapshot.nodes_by_address)
        self._apply(snapshot, snapshot.services, snapshot.endpoint_slices, node)
        return self._first_result(node)

    def update(
        self,
        snapshot: ClusterSnapshot,
        services: Iterable[ObjectKey],
        endpoint_slices: Iterable[ObjectKey],
    ) -> Translated:
        """The desired state after the given Services and EndpointSlices changed in
        ``snapshot`` (added, changed or deleted); the Node, and every Node's addresses, must
        be the last rebuild's."""
        if self._node is None or self._desired is None:
            raise RuntimeError("update() before rebuild()")
        self._apply(snapshot, services, endpoint_slices, self._node)
        return self._result(self._node, self._desired)

    def _apply(
        self,
        snapshot: ClusterSnapshot,
        services: Iterable[ObjectKey],
        endpoint_slices: Iterable[ObjectKey],
        node: NodeFacts,
    ) -> None:
        changed = set(services)
        for key in endpoint_slices:
            changed |= self._reindex_slice(key, snapshot.endpoint_slices.get(key))
        touched: set[VirtualServerKey] = set()
        ports: set[NodePortKey] = set()
        for key in changed:
            self._withdraw(key, touched, ports)
        addresses = AddressCache()
        for key in changed:
            service = snapshot.services.get(key)
            if service is None:
                self._cache.forget(key)
            elif proxied(service, self._settings):
                self._offer(service, node, addresses, touched, ports)
        for port_key in ports:
            self._settle_port(port_key, node, touched)
        for vs_key in touched:
            self._settle(vs_key)

    # -- the index of slices by service -----------------------------------------------------------

    def slices_of(self, service: ObjectKey) -> Iterable[EndpointSlice]:
        """The service's EndpointSlices of a handled address type, as last given."""
        return tuple(self._slices.get(service, {}).values())

    def _reindex_slice(
        self, key: ObjectKey, endpoint_slice: EndpointSlice | None
    ) -> set[ObjectKey]:
        """File the slice under its service; the services it left or joined."""
        owners = set()
        owner = self._slice_owners.pop(key, None)
        if owner is not None:
            owners.add(owner)
            group = self._slices[owner]
            del group[key]
            if not group:
                del self._slices[owner]
        if self._slice_rejections.pop(key, None) is not None:
            self._rejections_changed = True
        if endpoint_slice is None:
            return owners
        unhandled = unhandled_slice(key, endpoint_slice)
        if unhandled is not None:
            self._slice_rejections[key] = unhandled
            self._rejections_changed = True
            return owners
        self._slices.setdefault(endpoint_slice.service, {})[key] = endpoint_slice
        self._slice_owners[key] = endpoint_slice.service
        owners.add(endpoint_slice.service)
        return owners

    # -- services' shares ----------------------------------------------------------------------

    def _withdraw(
        self, key: ObjectKey, touched: set[VirtualServerKey], ports: set[NodePortKey]
    ) -> None:
        share = self._shares.pop(key, None)
        if share is None:
            return
        if self._service_rejections.pop(key, None) is not None:
            self._rejections_changed = True
        for name, entry in share.members:
            self._entries[name].remove(entry)
        if share.state is None:
            return
        for scope in share.state.no_local_endpoints:
            self._no_local[scope] -= 1
        for port_key in share.state.node_ports:
            _drop_claim(self._port_claims, port_key, key)
            ports.add(port_key)
        for vs_key in share.state.servers:
            _drop_claim(self._claims, vs_key, key)
            touched.add(vs_key)

    def _offer(
        self,
        service: Service,
        node: NodeFacts,
        addresses: AddressCache,
        touched: set[VirtualServerKey],
        ports: set[NodePortKey],
    ) -> None:
        key = service.key
        group = self._slices.get(key, {})
        slices = (
            list(group.values()) if len(group) < 2 else [group[k] for k in sorted(group, key=str)]
        )
        found = translate_service(
            service,
            slices,
            self._settings,
            (node, self._nodes_by_address),
            addresses,
            cache=self._cache,
        )
        if isinstance(found, Rejection):
            self._shares[key] = _Share(None, ())
            self._service_rejections[key] = (found,)
            self._rejections_changed = True
            return
        members = [hairpin_member(protocol, real) for protocol, real in found.hairpin]
        for name, entry in members:
            self._entries[name].add(entry)
        self._shares[key] = _Share(found, tuple(members))
        if found.rejections:
            self._service_rejections[key] = tuple(found.rejections)
            self._rejections_changed = True
        for scope in found.no_local_endpoints:
            self._no_local[scope] += 1
        for port_key, use in found.node_ports.items():
            self._port_claims.setdefault(port_key, {})[key] = Claim(key, service.created, use)
            ports.add(port_key)
        for vs_key, wanted in found.servers.items():
            self._claims.setdefault(vs_key, {})[key] = Claim(key, service.created, wanted.kind)
            touched.add(vs_key)

    # -- node ports' holders -------------------------------------------------------------------

    def _settle_port(
        self, key: NodePortKey, node: NodeFacts, touched: set[VirtualServerKey]
    ) -> None:
        """Give the node port to its best claim now; a health check starts or stops with it,
        and the port's NodePort virtual servers are settled again if its holder changed."""
        old = self._port_holders.pop(key, None)
        if old is not None:
            self._release_health_check(old, key)
        if self._port_conflicts.pop(key, None) is not None:
            self._rejections_changed = True
        claims = self._port_claims.get(key)
        new = None
        if claims:
            winner, lost = settle(key, claims.values())
            if lost:
                self._port_conflicts[key] = lost
                self._rejections_changed = True
            new = self._port_holders[key] = winner.service
            if winner.kind is PortUse.HEALTH_CHECK:
                self._take_health_check(new, key.port, node)
        if new != old:
            touched.update(
                VirtualServerKey(key.protocol, address, key.port)
                for address in node.node_port_addresses
            )

    def _take_health_check(self, service: ObjectKey, port: int, node: NodeFacts) -> None:
        # A service has one health-check node port: the one it held goes, whatever the order
        # its ports are settled in (its old port may be settled after its new one).
        self._drop_health_check(service)
        state = self._shares[service].state
        assert state is not None
        families = health_check_families(state, node)
        members = tuple(health_check_member(family, port) for family in families)
        for name, entry in members:
            self._entries[name].add(entry)
        self._health_held[service] = (port, members)
        self._health_checks[service] = port
        self._health_checks_changed = True

    def _release_health_check(self, service: ObjectKey, key: NodePortKey) -> None:
        held = self._health_held.get(service)
        if held is not None and held[0] == key.port and key.protocol is TransportProtocol.TCP:
            self._drop_health_check(service)

    def _drop_health_check(self, service: ObjectKey) -> None:
        held = self._health_held.pop(service, None)
        if held is None:
            return
        for name, entry in held[1]:
            self._entries[name].remove(entry)
        del self._health_checks[service]
        self._health_checks_changed = True

    # -- virtual servers' winners --------------------------------------------------------------

    def _settle(self, key: VirtualServerKey) -> None:
        """Give ``key`` to its best claim now, and its entries and address with it."""
        old = self._won.pop(key, None)
        if self._desired is not None:
            self._servers_before.setdefault(key, None if old is None else old.wanted)
        if old is not None:
            self._let_go(key, old)
        if self._conflicts.pop(key, None) is not None:
            self._rejections_changed = True
        claims = [
            claim
            for claim in self._claims.get(key, {}).values()
            if holds_node_port(key, claim.kind, claim.service, self._port_holders)
        ]
        if not claims:
            return
        lost: list[Rejection] = []
        if len(claims) == 1:
            winner = claims[0]
        else:
            winner, lost = settle(key, claims)
        if lost:
            self._conflicts[key] = lost
            self._rejections_changed = True
        state = self._shares[winner.service].state
        assert state is not None
        wanted = state.servers[key]
        firewall = state.firewalls.get(key)
        members = virtual_server_members(key, wanted, key in state.local_external, firewall)
        node_side = on_node(wanted)
        if node_side:
            self._nodes.add(key.address)
        else:
            self._bound.add(key.address)
            members.append(bound_address_member(key.address))
        won = _Won(
            wanted,
            tuple(members),
            node_side,
            blocks_node=firewall is not None and not firewall.allow_from_node,
        )
        for name, entry in won.members:
            self._entries[name].add(entry)
        if won.blocks_node:
            self._blocked.add(key)
            self._blocked_changed = True
        self._won[key] = won

    def _let_go(self, key: VirtualServerKey, won: _Won) -> None:
        for name, entry in won.members:
            self._entries[name].remove(entry)
        (self._nodes if won.on_node else self._bound).remove(key.address)
        if won.blocks_node:
            self._blocked.discard(key)
            self._blocked_changed = True

    # -- the result ----------------------------------------------------------------------------

    def _first_result(self, node: NodeFacts) -> DesiredState:
        """The desired state of a rebuild: every container built whole from the counts."""
        published = _Published(
            PersistentMap({key: won.wanted for key, won in self._won.items()}),
            PersistentSet(self._bound.counts.keys()),
            PersistentSet(self._nodes.counts.keys()),
            {name: PersistentSet(self._entries[name].counts.keys()) for name in SPECS},
        )
        for counted in self._entries.values():
            counted.track()
        self._bound.track()
        self._nodes.track()
        ipsets = {name: IPSetContent(spec, published.entries[name]) for name, spec in SPECS.items()}
        return self._publish(
            published,
            ipsets,
            build_iptables(self._settings, ipsets, self._blocked, node.pod_cidrs),
            node,
        )

    def _result(self, node: NodeFacts, previous: DesiredState) -> Translated:
        """The new desired state: what changed is written into copies of the previous one's
        containers that share everything else with them (``persistent``), so its cost follows
        the change."""
        servers_changed: dict[VirtualServerKey, DesiredVirtualServer | None] = {}
        servers_now: dict[VirtualServerKey, DesiredVirtualServer] = {}
        for key, before in self._servers_before.items():
            won = self._won.get(key)
            now = None if won is None else won.wanted
            if before is not now and before != now:
                servers_changed[key] = before
                if now is not None:
                    servers_now[key] = now
        self._servers_before = {}
        added: dict[str, frozenset[str]] = {}
        removed: dict[str, frozenset[str]] = {}
        for name, counted in self._entries.items():
            added[name], removed[name] = counted.delta()
        bound, unbound = self._bound.delta()
        nodes_came, nodes_went = self._nodes.delta()
        published = self._published
        published = _Published(
            published.servers.updated(servers_now, servers_changed.keys() - servers_now.keys()),
            published.bound.updated(bound, unbound),
            published.nodes.updated(nodes_came, nodes_went),
            {
                name: entries.updated(added[name], removed[name])
                for name, entries in published.entries.items()
            },
        )
        ipsets = {
            name: previous.ipsets[name]
            if previous.ipsets[name].entries is published.entries[name]
            else IPSetContent(spec, published.entries[name])
            for name, spec in SPECS.items()
        }
        emptied_or_filled = any(
            bool(ipsets[name].entries) != bool(previous.ipsets[name].entries)
            for name in SPECS
            if added[name] or removed[name]
        )
        iptables = (
            build_iptables(self._settings, ipsets, self._blocked, node.pod_cidrs)
            if emptied_or_filled or self._blocked_changed
            else previous.iptables
        )
        desired = self._publish(published, ipsets, iptables, node)
        return Translated(
            desired,
            DesiredChange(
                virtual_servers=MappingProxyType(servers_changed),
                added_entries=MappingProxyType({n: e for n, e in added.items() if e}),
                removed_entries=MappingProxyType({n: e for n, e in removed.items() if e}),
                bound=bound,
                unbound=unbound,
                iptables=iptables != previous.iptables,
            ),
        )

    def _publish(
        self,
        published: _Published,
        ipsets: dict[str, IPSetContent],
        iptables: tuple[IptablesRuleset, ...],
        node: NodeFacts,
    ) -> DesiredState:
        previous = self._desired
        desired = DesiredState(
            virtual_servers=published.servers,
            bound_addresses=published.bound,
            node_addresses=published.nodes,
            node_port_addresses=frozenset(node.node_port_addresses),
            ipsets=MappingProxyType(ipsets),
            iptables=iptables,
            exclude_cidrs=self._settings.exclude_cidrs,
            health_check_node_ports=MappingProxyType(dict(self._health_checks))
            if previous is None or self._health_checks_changed
            else previous.health_check_node_ports,
            no_local_endpoints=MappingProxyType(dict(self._no_local)),
            rejections=self._rejections()
            if previous is None or self._rejections_changed
            else previous.rejections,
        )
        self._rejections_changed = self._blocked_changed = self._health_checks_changed = False
        self._published = published
        self._desired = desired
        return desired

    def _rejections(self) -> tuple[Rejection, ...]:
        return (
            *self._slice_rejections.values(),
            *(r for found in self._service_rejections.values() for r in found),
            *(r for lost in self._conflicts.values() for r in lost),
            *(r for lost in self._port_conflicts.values() for r in lost),
        )


def translate(
    snapshot: ClusterSnapshot, settings: Settings, cache: ServiceCache | None = None
) -> DesiredState:
    """The desired state of the whole snapshot: the incremental translation, built afresh."""
    return IncrementalTranslation(settings, cache).rebuild(snapshot)
