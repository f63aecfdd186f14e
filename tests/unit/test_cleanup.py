from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ipvsproxy import cli
from ipvsproxy.cluster.source import load_snapshot
from ipvsproxy.kernel.errors import IptablesError
from ipvsproxy.kernel.protocols import Kernel
from ipvsproxy.kernel.testing import (
    FakeAddresses,
    FakeConntrack,
    FakeIPSets,
    FakeIptables,
    FakeIPVS,
    FakeSysctl,
)
from ipvsproxy.model import (
    DUMMY_INTERFACE,
    AddVirtualServer,
    BindAddress,
    DesiredState,
    IPFamily,
    IPSetContent,
    IPSetSpec,
    TransportProtocol,
    VirtualServer,
    VirtualServerKey,
    VirtualServerState,
)
from ipvsproxy.reconcile.cleanup import (
    OUR_SETS,
    CleanupPlan,
    CleanupReport,
    ObservedState,
    plan_cleanup,
    remove_leftovers,
)
from ipvsproxy.reconcile.ipvs_plan import owned_addresses, plan_ipvs
from ipvsproxy.translate import Settings, translate

NODE_IP = ipaddress.ip_address("192.168.10.11")
NODE_IP6 = ipaddress.ip_address("fd00:192::11")
FOREIGN_ON_NODE = VirtualServerKey(TransportProtocol.TCP, NODE_IP, 8080)
FOREIGN_ELSEWHERE = VirtualServerKey(TransportProtocol.TCP, ipaddress.ip_address("172.16.0.1"), 80)
# A firewall of someone else's that also sends packets through a chain before ours.
FOREIGN_RULES = """*filter
:MY-FIREWALL - [0:0]
-A INPUT -j MY-FIREWALL
-A MY-FIREWALL -s 10.0.0.1/32 -j ACCEPT
COMMIT
"""
FOREIGN_SET = IPSetContent(IPSetSpec("my-allowlist", "hash:ip"), frozenset({"10.0.0.1"}))


def _desired() -> DesiredState:
    snapshot, _ = load_snapshot(Path("examples/cluster.yaml"), "node-a")
    return translate(snapshot, Settings())


class Machine:
    """A node as ipvsproxy left it (from the example cluster), plus things that are not ours."""

    def __init__(self, desired: DesiredState) -> None:
        self.ipvs = FakeIPVS()
        self.addresses = FakeAddresses()
        self.ipsets = FakeIPSets()
        self.ipvs.apply(plan_ipvs(desired, {}, owned_addresses(desired, ())).ops)
        self.ipvs.apply(
            [AddVirtualServer(VirtualServer(k)) for k in (FOREIGN_ON_NODE, FOREIGN_ELSEWHERE)]
        )
        self.addresses.ensure_interface(DUMMY_INTERFACE)
        self.addresses.apply(DUMMY_INTERFACE, [BindAddress(a) for a in desired.bound_addresses])
        self.addresses.ensure_interface("eth0")
        self.addresses.apply("eth0", [BindAddress(NODE_IP), BindAddress(NODE_IP6)])
        for content in desired.ipsets.values():
            self.ipsets.replace(content)
        self.ipsets.replace(FOREIGN_SET)
        self.iptables = FakeIptables(ipset_names=lambda: set(self.ipsets.list_sets()))
        for ruleset in desired.iptables:
            self.iptables.restore(ruleset)
        self.iptables.netfilter.restore(IPFamily.IPV4, FOREIGN_RULES)

    def cleanup(self) -> CleanupReport:
        return remove_leftovers(self.ipvs, self.addresses, self.ipsets, self.iptables)

    def observed(
        self, chains: dict[IPFamily, dict[str, frozenset[str]]] | None = None
    ) -> ObservedState:
        return ObservedState(
            ipvs=self.ipvs.dump(),
            dummy_addresses=self.addresses.addresses(DUMMY_INTERFACE),
            dummy_exists=self.addresses.interface_exists(DUMMY_INTERFACE),
            node_addresses=self.addresses.all_addresses(),
            ipsets=self.ipsets.list_sets(),
            chains=chains or {},
        )


def test_every_virtual_server_we_made_is_planned_and_foreign_ones_are_not() -> None:
    desired = _desired()
    plan = plan_cleanup(Machine(desired).observed())
    assert set(plan.virtual_servers) == set(desired.virtual_servers)
    assert FOREIGN_ON_NODE not in plan.virtual_servers
    assert FOREIGN_ELSEWHERE not in plan.virtual_servers


def test_node_ports_are_recognised_by_their_ipset_membership_per_protocol_and_family() -> None:
    sets = {
        "KUBE-NODE-PORT-UDP": IPSetContent(
            IPSetSpec("KUBE-NODE-PORT-UDP", "bitmap:port"), frozenset({"30053"})
        ),
        "KUBE-6-NODE-PORT-LOCAL-TCP": IPSetContent(
            IPSetSpec("KUBE-6-NODE-PORT-LOCAL-TCP", "bitmap:port"), frozenset({"30443"})
        ),
        "KUBE-NODE-PORT-SCTP-HASH": IPSetContent(
            IPSetSpec("KUBE-NODE-PORT-SCTP-HASH", "hash:ip,port"),
            frozenset({"192.168.10.11,sctp:30132"}),
        ),
    }
    ours = [
        VirtualServerKey(TransportProtocol.UDP, NODE_IP, 30053),
        VirtualServerKey(TransportProtocol.TCP, NODE_IP6, 30443),
        VirtualServerKey(TransportProtocol.SCTP, NODE_IP, 30132),
    ]
    not_ours = [
        VirtualServerKey(TransportProtocol.TCP, NODE_IP, 30053),  # the port is a UDP node port only
        VirtualServerKey(TransportProtocol.TCP, NODE_IP, 30443),  # IPv6's set does not cover IPv4
        VirtualServerKey(
            TransportProtocol.UDP, ipaddress.ip_address("10.9.9.9"), 30053
        ),  # not local
    ]
    observed = ObservedState(
        ipvs={key: _state(key) for key in (*ours, *not_ours)},
        dummy_addresses=frozenset(),
        dummy_exists=False,
        node_addresses=frozenset({NODE_IP, NODE_IP6}),
        ipsets=sets,
        chains={},
    )
    assert set(plan_cleanup(observed).virtual_servers) == set(ours)


def _state(key: VirtualServerKey) -> VirtualServerState:
    return VirtualServerState(VirtualServer(key), {})


def test_our_sets_of_both_families_go_and_others_stay() -> None:
    machine = Machine(_desired())
    machine.ipsets.replace(
        IPSetContent(IPSetSpec("KUBE-6-LOAD-BALANCER-FW", "hash:ip,port", IPFamily.IPV6))
    )
    plan = plan_cleanup(machine.observed())
    assert "my-allowlist" not in plan.ipsets
    assert set(plan.ipsets) == set(machine.ipsets.list_sets()) - {"my-allowlist"}
    assert {"KUBE-CLUSTER-IP", "KUBE-6-CLUSTER-IP", "KUBE-6-LOAD-BALANCER-FW"} <= set(plan.ipsets)
    assert set(plan.ipsets) <= OUR_SETS


def test_chains_are_planned_per_family_and_empty_tables_dropped() -> None:
    nothing: frozenset[str] = frozenset()
    chains = {
        IPFamily.IPV4: {"nat": frozenset({"KUBE-SERVICES"}), "filter": nothing},
        IPFamily.IPV6: {"nat": nothing, "filter": nothing},
    }
    plan = plan_cleanup(Machine(_desired()).observed(chains))
    assert plan.chains == {IPFamily.IPV4: {"nat": frozenset({"KUBE-SERVICES"})}}
    assert plan.delete_interface


def test_a_clean_machine_plans_nothing() -> None:
    observed = ObservedState(
        ipvs={FOREIGN_ELSEWHERE: _state(FOREIGN_ELSEWHERE)},
        dummy_addresses=frozenset(),
        dummy_exists=False,
        node_addresses=frozenset({NODE_IP}),
        ipsets={"my-allowlist": FOREIGN_SET},
        chains={IPFamily.IPV4: {"nat": frozenset()}},
    )
    plan = plan_cleanup(observed)
    assert plan == CleanupPlan()
    assert not plan


def test_service_addresses_in_our_sets_are_ours_even_when_kube_ipvs0_is_gone() -> None:
    desired = _desired()
    machine = Machine(desired)
    machine.addresses.delete_interface(DUMMY_INTERFACE)
    plan = plan_cleanup(machine.observed())
    assert set(plan.virtual_servers) == set(desired.virtual_servers)
    assert not plan.delete_interface


def test_cleanup_removes_ours_in_order_and_leaves_the_rest() -> None:
    desired = _desired()
    machine = Machine(desired)
    report = machine.cleanup()

    assert report.failed == ()
    assert len([line for line in report.removed if "virtual server" in line]) == 8
    chains = (
        "filter/KUBE-FORWARD, filter/KUBE-IPVS-FILTER, filter/KUBE-IPVS-OUT-FILTER, "
        "filter/KUBE-NODE-PORT, filter/KUBE-PROXY-FIREWALL, filter/KUBE-SOURCE-RANGES-FIREWALL, "
        "nat/KUBE-LOAD-BALANCER, nat/KUBE-MARK-MASQ, nat/KUBE-NODE-PORT, nat/KUBE-POSTROUTING, "
        "nat/KUBE-SERVICES"
    )
    assert report.removed[8:10] == (
        f"removed IPv4 iptables chains {chains}",
        f"removed IPv6 iptables chains {chains}",
    )
    assert "removed ipset KUBE-6-CLUSTER-IP" in report.removed
    assert report.removed[-1] == "removed interface kube-ipvs0"

    assert set(machine.ipvs.dump()) == {FOREIGN_ON_NODE, FOREIGN_ELSEWHERE}
    assert not machine.addresses.interface_exists(DUMMY_INTERFACE)
    assert machine.addresses.addresses("eth0") == {NODE_IP, NODE_IP6}
    assert set(machine.ipsets.list_sets()) == {"my-allowlist"}
    for family in IPFamily:
        assert machine.iptables.our_chains(family) == {}
    saved = machine.iptables.netfilter.save(IPFamily.IPV4)
    assert "-A INPUT -j MY-FIREWALL" in saved
    assert "-A MY-FIREWALL -s 10.0.0.1/32 -j ACCEPT" in saved


def test_a_second_cleanup_does_nothing_and_reports_nothing() -> None:
    machine = Machine(_desired())
    machine.cleanup()
    assert machine.cleanup() == CleanupReport()


def test_a_set_someone_else_still_uses_fails_alone_and_is_retried() -> None:
    machine = Machine(_desired())
    machine.ipsets.hold("KUBE-CLUSTER-IP")
    report = machine.cleanup()
    assert report.failed == (
        "could not remove ipset KUBE-CLUSTER-IP: cannot destroy set "
        "KUBE-CLUSTER-IP: the set is in use by a kernel component (an iptables rule?)",
    )
    assert not machine.addresses.interface_exists(DUMMY_INTERFACE)
    assert set(machine.ipsets.list_sets()) == {"my-allowlist", "KUBE-CLUSTER-IP"}

    assert plan_cleanup(machine.observed()) == CleanupPlan(ipsets=("KUBE-CLUSTER-IP",))


class _BuggyIPSets(FakeIPSets):
    """Sets whose destroy has a bug (not a kernel refusal)."""

    def destroy(self, name: str) -> None:
        raise TypeError(f"a bug destroying {name}")


def test_a_bug_in_a_kernel_layer_propagates_instead_of_becoming_could_not_remove() -> None:
    machine = Machine(_desired())
    buggy = _BuggyIPSets()
    for content in machine.ipsets.list_sets().values():
        buggy.replace(content)
    machine.ipsets = buggy
    with pytest.raises(TypeError, match="a bug destroying"):
        machine.cleanup()


class _UnreadableIptables(FakeIptables):
    def our_chains(self, family: IPFamily) -> Mapping[str, frozenset[str]]:
        raise IptablesError(f"{family}: iptables-save not found")


def test_unreadable_chains_are_reported_and_the_rest_still_goes() -> None:
    machine = Machine(_desired())
    machine.iptables = _UnreadableIptables()
    report = machine.cleanup()
    assert report.failed == (
        "could not read IPv4 iptables chains: IPv4: iptables-save not found",
        "could not read IPv6 iptables chains: IPv6: iptables-save not found",
    )
    assert not machine.addresses.interface_exists(DUMMY_INTERFACE)


def _cli_on(machine: Machine, monkeypatch: pytest.MonkeyPatch, *args: str) -> Result:
    @contextmanager
    def opened(ipvs_optional: bool = False) -> Iterator[Kernel]:
        parts = (machine.ipvs, machine.addresses, machine.ipsets, machine.iptables)
        yield Kernel(*parts, FakeSysctl(), FakeConntrack())

    monkeypatch.setattr(cli, "real_kernel", opened)
    monkeypatch.setattr(cli, "require_net_admin", lambda: None)
    return CliRunner().invoke(cli.main, ["cleanup", *args])


def test_dry_run_lists_what_cleanup_would_remove_and_removes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    machine = Machine(_desired())
    before = (machine.ipvs.dump(), machine.ipsets.list_sets())
    listed = _cli_on(machine, monkeypatch, "--dry-run")
    assert listed.exit_code == 0, listed.output
    assert (machine.ipvs.dump(), machine.ipsets.list_sets()) == before
    assert machine.addresses.interface_exists(DUMMY_INTERFACE)
    would = listed.stdout.splitlines()
    removed = _cli_on(machine, monkeypatch).stdout.splitlines()
    # The same objects, in the same order, as the cleanup then removes.
    assert [line.removeprefix("would remove ") for line in would] == [
        line.removeprefix("removed ") for line in removed
    ]
    assert would[-1] == "would remove interface kube-ipvs0"


def test_cleanup_json_names_each_object_and_each_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    machine = Machine(_desired())
    planned = json.loads(_cli_on(machine, monkeypatch, "--dry-run", "--output", "json").stdout)
    assert planned["schema"] == "ipvsproxy.io/cleanup/v1"
    assert planned["dry_run"] is True and planned["failed"] == []
    assert "ipset KUBE-6-CLUSTER-IP" in planned["would_remove"]
    done = json.loads(_cli_on(machine, monkeypatch, "--output", "json").stdout)
    assert done["dry_run"] is False
    assert done["removed"] == planned["would_remove"]
    again = json.loads(_cli_on(machine, monkeypatch, "--output=json").stdout)
    assert again == {**done, "removed": []}


def test_an_external_ip_of_a_local_policy_on_the_node_is_ours_by_its_ipset_entry() -> None:
    """A Local-policy external IP goes into KUBE-EXTERNAL-IP-LOCAL instead of KUBE-EXTERNAL-IP;
    on the node's own address it is never bound on kube-ipvs0, so that entry is the record."""
    key = VirtualServerKey(TransportProtocol.TCP, NODE_IP, 8443)
    name = "KUBE-EXTERNAL-IP-LOCAL"
    observed = ObservedState(
        ipvs={key: _state(key), FOREIGN_ON_NODE: _state(FOREIGN_ON_NODE)},
        dummy_addresses=frozenset(),
        dummy_exists=False,
        node_addresses=frozenset({NODE_IP}),
        ipsets={
            name: IPSetContent(IPSetSpec(name, "hash:ip,port"), frozenset({f"{NODE_IP},tcp:8443"}))
        },
        chains={},
    )
    assert plan_cleanup(observed).virtual_servers == (key,)
