"""Our netlink requests, for any values, read back by an independent decoder: pyroute2's
message classes. (The captured vectors in test_netlink_bytes.py pin the attribute numbers to
the kernel's; this covers the values between: both families, every protocol, field widths and
byte orders.)"""

from __future__ import annotations

import ipaddress
import socket
import struct
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pyroute2.netlink.generic import ipvs as genl_ipvs
from pyroute2.netlink.nfnetlink import ipset as nfipset
from pyroute2.netlink.nfnetlink.nfctsocket import nfct_msg
from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg

from ipvsproxy.kernel import addresses, conntrack, ipvs, ipvs_abi
from ipvsproxy.kernel.ipset import codec
from ipvsproxy.kernel.ipset.entries import PROTOCOLS, Entry
from ipvsproxy.kernel.netlink import NLMSG_HEADER
from ipvsproxy.model import (
    IP_PROTOCOL_NUMBERS,
    SCHEDULERS,
    AddRealServer,
    AddVirtualServer,
    BindAddress,
    DeleteRealServer,
    DeleteVirtualServer,
    ForwardMethod,
    IPAddress,
    IPFamily,
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

ports = st.integers(0, 65535)
u32 = st.integers(0, 2**32 - 1)
v4: st.SearchStrategy[IPAddress] = st.ip_addresses(v=4)
v6: st.SearchStrategy[IPAddress] = st.ip_addresses(v=6)
families = st.sampled_from([v4, v6])


def _decoded(cls: Any, kind: int, flags: int, body: bytes) -> Any:
    message = cls(NLMSG_HEADER.pack(NLMSG_HEADER.size + len(body), kind, flags, 1, 0) + body)
    message.decode()
    return message


def _family(address: IPAddress) -> int:
    return socket.AF_INET if address.version == 4 else socket.AF_INET6


@st.composite
def virtual_servers(draw: st.DrawFn) -> VirtualServer:
    key = VirtualServerKey(
        draw(st.sampled_from(TransportProtocol)), draw(draw(families)), draw(ports)
    )
    writable = [
        flag for flag in ServiceFlags if flag not in (ServiceFlags.NONE, ServiceFlags.HASHED)
    ]
    flags = ServiceFlags.NONE
    for flag in draw(st.lists(st.sampled_from(writable), unique=True)):
        flags |= flag
    return VirtualServer(key, draw(st.sampled_from(sorted(SCHEDULERS))), flags, draw(u32))


@st.composite
def real_servers(draw: st.DrawFn, version: int) -> RealServer:
    return RealServer(
        RealServerKey(draw(v4 if version == 4 else v6), draw(ports)),
        draw(st.integers(0, 2**31 - 1)),
        draw(st.sampled_from(ForwardMethod)),
        draw(u32),
        draw(u32),
    )


def _service(message: Any) -> Any:
    return message.get_attr("IPVS_CMD_ATTR_SERVICE")


def _assert_names(service: Any, key: VirtualServerKey) -> None:
    assert service.get_attr("IPVS_SVC_ATTR_AF") == _family(key.address)
    assert service.get_attr("IPVS_SVC_ATTR_PROTOCOL") == IP_PROTOCOL_NUMBERS[key.protocol]
    assert ipaddress.ip_address(service.get_attr("IPVS_SVC_ATTR_ADDR")) == key.address
    assert service.get_attr("IPVS_SVC_ATTR_PORT") == key.port


@given(virtual_servers(), st.booleans())
def test_a_virtual_server_reads_back_through_pyroute2(server: VirtualServer, add: bool) -> None:
    op = AddVirtualServer(server) if add else UpdateVirtualServer(server)
    flags, body = ipvs.encode_op(op)
    message = _decoded(genl_ipvs.ipvsmsg, 0x1C, flags, body)

    command = genl_ipvs.IPVS_CMD_NEW_SERVICE if add else genl_ipvs.IPVS_CMD_SET_SERVICE
    assert message["cmd"] == command
    service = _service(message)
    _assert_names(service, server.key)
    assert service.get_attr("IPVS_SVC_ATTR_SCHED_NAME") == server.scheduler
    assert service.get_attr("IPVS_SVC_ATTR_FLAGS")["flags"] == server.flags
    assert service.get_attr("IPVS_SVC_ATTR_TIMEOUT") == server.timeout
    # The kernel reads a netmask; for IPv6, a prefix length in host byte order.
    netmask = socket.inet_aton(service.get_attr("IPVS_SVC_ATTR_NETMASK"))
    full = b"\xff" * 4 if server.key.address.version == 4 else struct.pack("=I", 128)
    assert netmask == full


@given(virtual_servers())
def test_a_virtual_server_delete_names_it_alone(server: VirtualServer) -> None:
    flags, body = ipvs.encode_op(DeleteVirtualServer(server.key))
    message = _decoded(genl_ipvs.ipvsmsg, 0x1C, flags, body)

    assert message["cmd"] == genl_ipvs.IPVS_CMD_DEL_SERVICE
    _assert_names(_service(message), server.key)
    assert message.get_attr("IPVS_CMD_ATTR_DEST") is None


@given(st.data(), virtual_servers(), st.sampled_from(["add", "update", "delete"]))
def test_a_real_server_reads_back_through_pyroute2(
    data: st.DataObject, virtual: VirtualServer, action: str
) -> None:
    real = data.draw(real_servers(virtual.key.address.version))
    ops: dict[str, IPVSOp] = {
        "add": AddRealServer(virtual.key, real),
        "update": UpdateRealServer(virtual.key, real),
        "delete": DeleteRealServer(virtual.key, real.key),
    }
    op = ops[action]
    flags, body = ipvs.encode_op(op)
    message = _decoded(genl_ipvs.ipvsmsg, 0x1C, flags, body)

    _assert_names(_service(message), virtual.key)
    dest = message.get_attr("IPVS_CMD_ATTR_DEST")
    assert dest.get_attr("IPVS_DEST_ATTR_ADDR_FAMILY") == _family(real.key.address)
    assert ipaddress.ip_address(dest.get_attr("IPVS_DEST_ATTR_ADDR")) == real.key.address
    assert dest.get_attr("IPVS_DEST_ATTR_PORT") == real.key.port
    if action != "delete":
        assert dest.get_attr("IPVS_DEST_ATTR_FWD_METHOD") == real.forward
        assert dest.get_attr("IPVS_DEST_ATTR_WEIGHT") == real.weight
        assert dest.get_attr("IPVS_DEST_ATTR_U_THRESH") == real.upper_threshold
        assert dest.get_attr("IPVS_DEST_ATTR_L_THRESH") == real.lower_threshold


@given(st.integers(0, 2147483), st.integers(0, 2147483), st.integers(0, 2147483))
def test_timeouts_read_back_through_pyroute2(tcp: int, tcp_fin: int, udp: int) -> None:
    message = _decoded(
        genl_ipvs.ipvsmsg, 0x1C, 0, ipvs.encode_timeouts(IPVSTimeouts(tcp, tcp_fin, udp))
    )

    assert message["cmd"] == genl_ipvs.IPVS_CMD_SET_CONFIG
    for name, seconds in (("TCP", tcp), ("TCP_FIN", tcp_fin), ("UDP", udp)):
        sent = message.get_attr(f"IPVS_CMD_ATTR_TIMEOUT_{name}")
        # pyroute2 shows these as hex; a 0 is left out, as the kernel then keeps its own.
        sent_bytes = None if sent is None else bytes.fromhex(sent.replace(":", ""))
        assert sent_bytes == (struct.pack("=I", seconds) if seconds else None)


@st.composite
def entries(draw: st.DrawFn) -> Entry:
    family = draw(families)
    shape = draw(st.sampled_from(["ip", "ip,port", "ip,port,ip", "ip,port,net", "port"]))
    if shape == "port":
        return Entry(port=draw(ports))
    address = draw(family)
    if shape == "ip":
        return Entry(address)
    protocol, port = draw(st.sampled_from(PROTOCOLS)), draw(ports)
    if shape == "ip,port":
        return Entry(address, protocol, port)
    second = draw(family)
    prefix = draw(st.integers(1, second.max_prefixlen)) if shape == "ip,port,net" else None
    return Entry(address, protocol, port, second, prefix)


def _ipset_address(data: Any, name: str) -> IPAddress | None:
    nested = data.get_attr(name)
    if nested is None:
        return None
    found = nested.get_attr("IPSET_ATTR_IPADDR_IPV4") or nested.get_attr("IPSET_ATTR_IPADDR_IPV6")
    return ipaddress.ip_address(found)


@given(entries(), st.sampled_from([nfipset.IPSET_CMD_ADD, nfipset.IPSET_CMD_DEL]))
def test_an_ipset_entry_reads_back_through_pyroute2(entry: Entry, command: int) -> None:
    body = codec.request_body("KUBE-CLUSTER-IP", codec.entry_data(entry))
    message = _decoded(nfipset.ipset_msg, (6 << 8) | command, 0, body)

    assert message.get_attr("IPSET_ATTR_PROTOCOL") == codec.IPSET_PROTOCOL
    assert message.get_attr("IPSET_ATTR_SETNAME") == "KUBE-CLUSTER-IP"
    data = message.get_attr("IPSET_ATTR_DATA")
    # pyroute2 names attribute 1 IP_FROM and 4 PORT_FROM, as the kernel's header aliases them.
    assert _ipset_address(data, "IPSET_ATTR_IP_FROM") == entry.address
    assert data.get_attr("IPSET_ATTR_PORT_FROM") == entry.port
    protocol = data.get_attr("IPSET_ATTR_PROTO")
    assert protocol == (None if entry.protocol is None else codec.IP_PROTOCOLS[entry.protocol])
    assert _ipset_address(data, "IPSET_ATTR_IP2") == entry.address2
    assert data.get_attr("IPSET_ATTR_CIDR2") == entry.prefix2


@given(
    st.sampled_from(
        ["hash:ip", "hash:ip,port", "hash:ip,port,ip", "hash:ip,port,net", "bitmap:port"]
    ),
    st.sampled_from([4, 6]),
    st.integers(0, 255),
)
def test_an_ipset_creation_reads_back_through_pyroute2(
    set_type: str, version: int, revision: int
) -> None:
    spec = IPSetSpec("KUBE-X", set_type, IPFamily.IPV4 if version == 4 else IPFamily.IPV6)
    message = _decoded(
        nfipset.ipset_msg, (6 << 8) | nfipset.IPSET_CMD_CREATE, 0, codec.create_body(spec, revision)
    )

    assert message.get_attr("IPSET_ATTR_TYPENAME") == set_type
    assert message.get_attr("IPSET_ATTR_REVISION") == revision
    nfproto = 0 if set_type == "bitmap:port" else (2 if version == 4 else 10)
    assert message.get_attr("IPSET_ATTR_FAMILY") == nfproto
    data = message.get_attr("IPSET_ATTR_DATA")
    if set_type == "bitmap:port":
        assert (data.get_attr("IPSET_ATTR_PORT_FROM"), data.get_attr("IPSET_ATTR_PORT_TO")) == (
            0,
            65535,
        )
    else:
        assert (data.get_attr("IPSET_ATTR_HASHSIZE"), data.get_attr("IPSET_ATTR_MAXELEM")) == (
            1024,
            65536,
        )


@given(st.data(), families, st.sampled_from(TransportProtocol), ports, ports)
def test_a_conntrack_delete_reads_back_through_pyroute2(
    data: st.DataObject, family: Any, protocol: TransportProtocol, port: int, client_port: int
) -> None:
    service = VirtualServerKey(protocol, data.draw(family), port)
    flow = conntrack.Flow(
        service, RealServerKey(data.draw(family), data.draw(ports)), data.draw(family), client_port
    )
    message = _decoded(nfct_msg, *conntrack.delete_request(flow))

    assert message["nfgen_family"] == _family(flow.client)
    original = message.get_attr("CTA_TUPLE_ORIG")
    addresses_ = original.get_attr("CTA_TUPLE_IP")
    v = "V4" if flow.client.version == 4 else "V6"
    assert ipaddress.ip_address(addresses_.get_attr(f"CTA_IP_{v}_SRC")) == flow.client
    assert ipaddress.ip_address(addresses_.get_attr(f"CTA_IP_{v}_DST")) == service.address
    ports_ = original.get_attr("CTA_TUPLE_PROTO")
    assert ports_.get_attr("CTA_PROTO_NUM") == IP_PROTOCOL_NUMBERS[protocol]
    assert ports_.get_attr("CTA_PROTO_SRC_PORT") == client_port
    assert ports_.get_attr("CTA_PROTO_DST_PORT") == port
    assert message.get_attr("CTA_TUPLE_REPLY") is None


@given(families.flatmap(lambda family: family), st.booleans(), st.integers(1, 2**31 - 1))
def test_an_address_request_reads_back_through_pyroute2(
    address: IPAddress, bind: bool, index: int
) -> None:
    op = BindAddress(address) if bind else UnbindAddress(address)
    message = _decoded(ifaddrmsg, *addresses.address_request(op, index))

    assert message["header"]["type"] == (addresses.RTM_NEWADDR if bind else addresses.RTM_DELADDR)
    assert message["family"] == _family(address)
    assert message["prefixlen"] == address.max_prefixlen
    assert message["index"] == index
    assert message["flags"] == (addresses.IFA_F_NODAD if bind and address.version == 6 else 0)
    assert ipaddress.ip_address(message.get_attr("IFA_LOCAL")) == address
    assert ipaddress.ip_address(message.get_attr("IFA_ADDRESS")) == address


def test_our_ipvs_numbers_are_pyroute2_s() -> None:
    """``ipvs_abi`` stands in for pyroute2's module on the start path: the same numbers."""
    commands = {name: value for name, value in vars(ipvs_abi).items() if "_CMD_" in name}
    assert len(commands) == 10
    assert commands == {name: getattr(genl_ipvs, name) for name in commands}
    assert (ipvs_abi.GENL_NAME, ipvs_abi.GENL_VERSION) == (
        genl_ipvs.GENL_NAME,
        genl_ipvs.GENL_VERSION,
    )
    for ours, theirs in (
        (ipvs_abi.COMMAND_ATTRIBUTES, genl_ipvs.ipvsmsg),
        (ipvs_abi.SERVICE_ATTRIBUTES, genl_ipvs.ipvsmsg.service),
        (ipvs_abi.DEST_ATTRIBUTES, genl_ipvs.ipvsmsg.dest),
        (ipvs_abi.STATS_ATTRIBUTES, genl_ipvs.ipvsstats.stats),
        (ipvs_abi.STATS_ATTRIBUTES, genl_ipvs.ipvsstats.stats64),
    ):
        assert ours == tuple(name for name, _ in theirs.nla_map)
