"""Each netlink request the kernel layer encodes, beside the reference tool's command that asks
the kernel for the same thing (ipvsadm, ipset, ip, conntrack), and what the kernel then holds.

``capture.py`` runs both in the lab and keeps what the tool sent and what the kernel answered
in ``vectors.json``; ``tests/unit/test_netlink_bytes.py`` checks our encoders and decoders
against those bytes without a kernel.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pyroute2.netlink.nfnetlink import NFNL_SUBSYS_IPSET
from pyroute2.netlink.nfnetlink import ipset as nfipset

from ipvsproxy.kernel import addresses, conntrack, ipvs
from ipvsproxy.kernel.conntrack import Flow
from ipvsproxy.kernel.ipset import codec
from ipvsproxy.kernel.ipset.entries import Entry
from ipvsproxy.kernel.netlink import NETLINK_GENERIC, NETLINK_NETFILTER, Request
from ipvsproxy.model import (
    AddRealServer,
    AddressOp,
    AddVirtualServer,
    BindAddress,
    DeleteRealServer,
    DeleteVirtualServer,
    IPFamily,
    IPSetContent,
    IPSetSpec,
    IPVSOp,
    IPVSTimeouts,
    RealServer,
    RealServerKey,
    ServiceFlags,
    TransportProtocol,
    UnbindAddress,
    UpdateRealServer,
    UpdateVirtualServer,
    VirtualServer,
    VirtualServerKey,
)

TCP, UDP, SCTP = TransportProtocol.TCP, TransportProtocol.UDP, TransportProtocol.SCTP
V4, V6 = IPFamily.IPV4, IPFamily.IPV6
ip = ipaddress.ip_address
INTERFACE = "kube-ipvs0"


@dataclass(frozen=True)
class Context:
    """What a request names that the kernel chose when the vectors were captured."""

    ipvs_family: int  # the id of the "IPVS" generic netlink family
    interface: int  # the index of kube-ipvs0


# Our payload and the reference tool's, where the two differ in bytes by design: True when
# they mean the same.
Same = Callable[[bytes, bytes], bool]


def padded_address(ours: bytes, theirs: bytes) -> bool:
    """libipvs sends every address as a 16-byte union nf_inet_addr; we send 4 bytes for IPv4."""
    return len(ours) in (4, 16) and theirs == ours + b"\0" * (16 - len(ours))


def same_flags(ours: bytes, theirs: bytes) -> bool:
    """struct ip_vs_flags {flags, mask}: ipvsadm's mask covers every flag, ours those we may
    write (never HASHED); the flags themselves must agree."""
    return len(ours) == len(theirs) == 8 and ours[:4] == theirs[:4]


@dataclass(frozen=True)
class Case:
    """One request of ours and the reference command that asks the kernel for the same."""

    name: str
    protocol: int
    reference: tuple[str, ...]
    ours: Callable[[Context], Request]
    # The kernel state read back afterwards: "ipvs", "ipvs_timeouts", "ipset", "addresses",
    # or "conntrack".
    state: str
    setup: tuple[tuple[str, ...], ...] = ()
    # The fixed header after the netlink header (genlmsghdr, nfgenmsg, ifaddrmsg): its length
    # and whether the tool's must equal ours byte for byte.
    header: int = 4
    same_header: bool = True
    # Attribute paths that are nested although the tool does not flag them (libnl, for IPVS).
    nested: frozenset[tuple[int, ...]] = frozenset()
    # Attribute paths, in the kernel's numbers (its uapi headers), where the bytes differ by
    # design, and how they compare there.
    differences: Mapping[tuple[int, ...], Same] = field(default_factory=dict)
    # What our decoder must read in the kernel's answer to a dump of ``state`` afterwards,
    # and before (after the setup), where that tells something.
    expected: frozenset[object] = frozenset()
    expected_before: frozenset[object] = frozenset()


# --- IPVS (include/uapi/linux/ip_vs.h), against ipvsadm --------------------------------------

# IPVS_CMD_ATTR_SERVICE 1 and IPVS_CMD_ATTR_DEST 2 nest; in them IPVS_SVC_ATTR_ADDR 3,
# IPVS_SVC_ATTR_FLAGS 7 and IPVS_DEST_ATTR_ADDR 1 differ by design.
IPVS_NESTED = frozenset({(1,), (2,)})
IPVS_DIFFERENCES: Mapping[tuple[int, ...], Same] = {
    (1, 3): padded_address,
    (1, 7): same_flags,
    (2, 1): padded_address,
}


def _ipvs_request(op: IPVSOp) -> Callable[[Context], Request]:
    def request(context: Context) -> Request:
        flags, body = ipvs.encode_op(op)
        return context.ipvs_family, flags, body

    return request


def _ipvs_case(
    name: str,
    reference: tuple[str, ...],
    op: IPVSOp,
    expected: frozenset[object] = frozenset(),
    setup: tuple[tuple[str, ...], ...] = (),
) -> Case:
    return Case(
        name,
        NETLINK_GENERIC,
        reference,
        _ipvs_request(op),
        "ipvs",
        setup=setup,
        nested=IPVS_NESTED,
        differences=IPVS_DIFFERENCES,
        expected=expected,
    )


WEB = VirtualServerKey(TCP, ip("10.96.0.10"), 80)
DNS6 = VirtualServerKey(UDP, ip("fd00:10:96::a"), 53)
STREAM = VirtualServerKey(SCTP, ip("10.96.0.11"), 9000)
POD = RealServerKey(ip("10.244.1.2"), 8080)
POD6 = RealServerKey(ip("fd00:10:244:1::2"), 53)
PERSISTENT_DNS6 = VirtualServer(DNS6, "sh", ServiceFlags.PERSISTENT, 10800)
ADD_WEB = ("ipvsadm", "-A", "-t", "10.96.0.10:80", "-s", "rr")
ADD_DNS6 = ("ipvsadm", "-A", "-u", "[fd00:10:96::a]:53", "-s", "sh", "-p", "10800")
POD_OF_WEB = ("-t", "10.96.0.10:80", "-r", "10.244.1.2:8080")
ADD_POD = ("ipvsadm", "-a", *POD_OF_WEB, "-m", "-w", "1")

IPVS_CASES = [
    _ipvs_case(
        "ipvs: add an IPv4 TCP virtual server",
        ADD_WEB,
        AddVirtualServer(VirtualServer(WEB, "rr")),
        frozenset({VirtualServer(WEB, "rr")}),
    ),
    _ipvs_case(
        "ipvs: add an IPv6 UDP virtual server with persistence",
        ADD_DNS6,
        AddVirtualServer(PERSISTENT_DNS6),
        frozenset({PERSISTENT_DNS6}),
    ),
    _ipvs_case(
        "ipvs: add an SCTP virtual server",
        ("ipvsadm", "-A", "--sctp-service", "10.96.0.11:9000", "-s", "wrr"),
        AddVirtualServer(VirtualServer(STREAM, "wrr")),
        frozenset({VirtualServer(STREAM, "wrr")}),
    ),
    _ipvs_case(
        "ipvs: change a virtual server's scheduler",
        ("ipvsadm", "-E", "-t", "10.96.0.10:80", "-s", "wlc"),
        UpdateVirtualServer(VirtualServer(WEB, "wlc")),
        frozenset({VirtualServer(WEB, "wlc")}),
        setup=(ADD_WEB,),
    ),
    _ipvs_case(
        "ipvs: delete a virtual server",
        ("ipvsadm", "-D", "-t", "10.96.0.10:80"),
        DeleteVirtualServer(WEB),
        setup=(ADD_WEB,),
    ),
    _ipvs_case(
        "ipvs: add a masqueraded real server with thresholds",
        ("ipvsadm", "-a", *POD_OF_WEB, "-m", "-w", "3", "-x", "100", "-y", "10"),
        AddRealServer(WEB, RealServer(POD, 3, upper_threshold=100, lower_threshold=10)),
        frozenset(
            {VirtualServer(WEB), RealServer(POD, 3, upper_threshold=100, lower_threshold=10)}
        ),
        setup=(ADD_WEB,),
    ),
    _ipvs_case(
        "ipvs: add an IPv6 real server",
        ("ipvsadm", "-a", "-u", "[fd00:10:96::a]:53", "-r", "[fd00:10:244:1::2]:53", "-m"),
        AddRealServer(DNS6, RealServer(POD6)),
        frozenset({PERSISTENT_DNS6, RealServer(POD6)}),
        setup=(ADD_DNS6,),
    ),
    _ipvs_case(
        "ipvs: set a real server's weight to 0",
        ("ipvsadm", "-e", *POD_OF_WEB, "-m", "-w", "0"),
        UpdateRealServer(WEB, RealServer(POD, 0)),
        frozenset({VirtualServer(WEB), RealServer(POD, 0)}),
        setup=(ADD_WEB, ADD_POD),
    ),
    _ipvs_case(
        "ipvs: delete a real server",
        ("ipvsadm", "-d", *POD_OF_WEB),
        DeleteRealServer(WEB, POD),
        frozenset({VirtualServer(WEB)}),
        setup=(ADD_WEB, ADD_POD),
    ),
    Case(
        "ipvs: set the connection timeouts",
        NETLINK_GENERIC,
        ("ipvsadm", "--set", "901", "121", "301"),
        lambda context: (
            context.ipvs_family,
            0,
            ipvs.encode_timeouts(IPVSTimeouts(901, 121, 301)),
        ),
        "ipvs_timeouts",
        expected=frozenset({IPVSTimeouts(901, 121, 301)}),
    ),
]

# --- ipsets (include/uapi/linux/netfilter/ipset/ip_set.h), against ipset(8) ------------------

# The type revisions ipset(8) asks for (the newest it knows); the kernel layer asks the kernel
# for its newest, an input here rather than something it encodes.
IPSET_REVISIONS = {
    "hash:ip": 5,
    "hash:ip,port": 6,
    "hash:ip,port,ip": 6,
    "hash:ip,port,net": 8,
    "bitmap:port": 3,
}


def _ipset_type(command: int) -> int:
    return int(NFNL_SUBSYS_IPSET << 8) | command


def _ipset_case(
    name: str,
    reference: tuple[str, ...],
    command: int,
    body: bytes,
    expected: frozenset[object],
    *,
    setup: tuple[tuple[str, ...], ...] = (),
) -> Case:
    return Case(
        name,
        NETLINK_NETFILTER,
        reference,
        lambda _: (_ipset_type(command), 0, body),
        "ipset",
        setup=setup,
        # nfgenmsg's family: ipset(8) puts the set's there, the kernel reads IPSET_ATTR_FAMILY.
        same_header=False,
        expected=expected,
    )


def _create(name: str, set_type: str, family: IPFamily) -> tuple[str, ...]:
    options = ("range", "0-65535") if set_type == "bitmap:port" else (
        "family", "inet" if family is V4 else "inet6", "hashsize", "1024", "maxelem", "65536",
    )  # fmt: skip
    return ("ipset", "create", name, set_type, *options)


def _created(name: str, set_type: str, family: IPFamily = V4) -> Case:
    spec = IPSetSpec(name, set_type, family)
    return _ipset_case(
        f"ipset: create a {set_type} set ({family})",
        _create(name, set_type, family),
        nfipset.IPSET_CMD_CREATE,
        codec.create_body(spec, IPSET_REVISIONS[set_type]),
        frozenset({IPSetContent(IPSetSpec(name, set_type, family))}),
    )


def _added(spec: IPSetSpec, text: str, entry: Entry) -> Case:
    return _ipset_case(
        f"ipset: add {text} to a {spec.set_type} set ({spec.family})",
        ("ipset", "add", spec.name, text),
        nfipset.IPSET_CMD_ADD,
        codec.request_body(spec.name, codec.entry_data(entry)),
        frozenset({IPSetContent(spec, frozenset({text}))}),
        setup=(_create(spec.name, spec.set_type, spec.family),),
    )


CLUSTER_IP = IPSetSpec("KUBE-CLUSTER-IP", "hash:ip,port", V4)
LOOP_BACK6 = IPSetSpec("KUBE-6-LOOP-BACK", "hash:ip,port,ip", V6)
SOURCE_CIDR = IPSetSpec("KUBE-LOAD-BALANCER-SOURCE-CIDR", "hash:ip,port,net", V4)
NODE_PORT = IPSetSpec("KUBE-NODE-PORT-TCP", "bitmap:port", V4)
LOCAL_ADDRESS = IPSetSpec("IPVSP-T-IP", "hash:ip", V4)
WEB_ENTRY = Entry(ip("10.96.0.10"), "tcp", 80)
SPARE = "KUBE-CLUSTER-IP-SPARE"

IPSET_CASES = [
    _created(CLUSTER_IP.name, "hash:ip,port"),
    _created(LOOP_BACK6.name, "hash:ip,port,ip", V6),
    _created(SOURCE_CIDR.name, "hash:ip,port,net"),
    _created(NODE_PORT.name, "bitmap:port"),
    _created(LOCAL_ADDRESS.name, "hash:ip"),
    _added(CLUSTER_IP, "10.96.0.10,tcp:80", WEB_ENTRY),
    _added(CLUSTER_IP, "10.96.0.11,sctp:9000", Entry(ip("10.96.0.11"), "sctp", 9000)),
    _added(
        LOOP_BACK6,
        "fd00:10:244:1::2,udp:53,fd00:10:244:1::2",
        Entry(ip("fd00:10:244:1::2"), "udp", 53, ip("fd00:10:244:1::2")),
    ),
    _added(
        SOURCE_CIDR,
        "10.96.0.10,tcp:80,10.0.0.0/8",
        Entry(ip("10.96.0.10"), "tcp", 80, ip("10.0.0.0"), 8),
    ),
    _added(NODE_PORT, "30080", Entry(port=30080)),
    _added(LOCAL_ADDRESS, "10.0.0.1", Entry(ip("10.0.0.1"))),
    _ipset_case(
        "ipset: delete an entry",
        ("ipset", "del", CLUSTER_IP.name, "10.96.0.10,tcp:80"),
        nfipset.IPSET_CMD_DEL,
        codec.request_body(CLUSTER_IP.name, codec.entry_data(WEB_ENTRY)),
        frozenset({IPSetContent(CLUSTER_IP)}),
        setup=(
            _create(CLUSTER_IP.name, "hash:ip,port", V4),
            ("ipset", "add", CLUSTER_IP.name, "10.96.0.10,tcp:80"),
        ),
    ),
    _ipset_case(
        "ipset: swap two sets",
        ("ipset", "swap", CLUSTER_IP.name, SPARE),
        nfipset.IPSET_CMD_SWAP,
        codec.swap_body(CLUSTER_IP.name, SPARE),
        frozenset(
            {
                IPSetContent(CLUSTER_IP, frozenset({"10.96.0.10,tcp:80"})),
                IPSetContent(IPSetSpec(SPARE, "hash:ip,port")),
            }
        ),
        setup=(
            _create(CLUSTER_IP.name, "hash:ip,port", V4),
            _create(SPARE, "hash:ip,port", V4),
            ("ipset", "add", SPARE, "10.96.0.10,tcp:80"),
        ),
    ),
    _ipset_case(
        "ipset: destroy a set",
        ("ipset", "destroy", CLUSTER_IP.name),
        nfipset.IPSET_CMD_DESTROY,
        codec.request_body(CLUSTER_IP.name),
        frozenset(),
        setup=(_create(CLUSTER_IP.name, "hash:ip,port", V4),),
    ),
]


# --- kube-ipvs0's addresses (include/uapi/linux/if_addr.h), against ip(8) ---------------------


def _address_case(
    name: str, reference: tuple[str, ...], op: AddressOp, expected: frozenset[object]
) -> Case:
    bound = op.address
    setup = () if isinstance(op, BindAddress) else (_ip_address("add", bound),)
    return Case(
        name,
        addresses.NETLINK_ROUTE,
        reference,
        lambda context: addresses.address_request(op, context.interface),
        "addresses",
        setup=setup,
        header=addresses.IFADDRMSG.size,
        expected=expected,
    )


def _ip_address(
    action: str, address: ipaddress.IPv4Address | ipaddress.IPv6Address
) -> tuple[str, ...]:
    prefix = 32 if address.version == 4 else 128
    nodad = ("nodad",) if address.version == 6 and action == "add" else ()
    return ("ip", "address", action, f"{address}/{prefix}", "dev", INTERFACE, *nodad)


SERVICE_IP, SERVICE_IP6 = ip("10.96.0.10"), ip("fd00:10:96::a")
ADDRESS_CASES = [
    _address_case(
        "addresses: bind an IPv4 address",
        _ip_address("add", SERVICE_IP),
        BindAddress(SERVICE_IP),
        frozenset({SERVICE_IP}),
    ),
    _address_case(
        "addresses: bind an IPv6 address without duplicate address detection",
        _ip_address("add", SERVICE_IP6),
        BindAddress(SERVICE_IP6),
        frozenset({SERVICE_IP6}),
    ),
    _address_case(
        "addresses: unbind an IPv4 address",
        _ip_address("del", SERVICE_IP),
        UnbindAddress(SERVICE_IP),
        frozenset(),
    ),
    _address_case(
        "addresses: unbind an IPv6 address",
        _ip_address("del", SERVICE_IP6),
        UnbindAddress(SERVICE_IP6),
        frozenset(),
    ),
]


# --- conntrack (include/uapi/linux/netfilter/nfnetlink_conntrack.h), against conntrack(8) ----


def _conntrack_case(family: str, client: str, service: str, endpoint: str) -> Case:
    flow = Flow(
        VirtualServerKey(UDP, ip(service), 53),
        RealServerKey(ip(endpoint), 8053),
        ip(client),
        40001,
    )
    original = ("-p", "udp", "-s", client, "-d", service, "--sport", "40001", "--dport", "53")
    reply = ("-r", endpoint, "-q", client, "--reply-port-src", "8053", "--reply-port-dst", "40001")
    return Case(
        f"conntrack: delete an {family} UDP flow",
        NETLINK_NETFILTER,
        ("conntrack", "-D", *original),
        lambda _: conntrack.delete_request(flow),
        "conntrack",
        setup=(("conntrack", "-I", *original, *reply, "-t", "120"),),
        expected_before=frozenset({flow}),
    )


CONNTRACK_CASES = [
    _conntrack_case("IPv4", "10.244.9.9", "10.96.0.10", "10.244.1.2"),
    _conntrack_case("IPv6", "fd00:10:244:9::9", "fd00:10:96::a", "fd00:10:244:1::2"),
]

CASES = [*IPVS_CASES, *IPSET_CASES, *ADDRESS_CASES, *CONNTRACK_CASES]
