"""IPVS's generic netlink numbers (linux/ip_vs.h): its family, commands and attributes.

pyroute2 carries them too (``pyroute2.netlink.generic.ipvs``), but that module imports its
netlink sockets, and asyncio and ssl with them: 0.3 s of ``sync --once``'s start in the lab, for
numbers the kernel's ABI fixes. Unit tests hold these to pyroute2's and decode our requests
with its message classes; the lab's contract tests, to the kernel.
"""

from __future__ import annotations

GENL_NAME = "IPVS"
GENL_VERSION = 1

IPVS_CMD_NEW_SERVICE = 1
IPVS_CMD_SET_SERVICE = 2
IPVS_CMD_DEL_SERVICE = 3
IPVS_CMD_GET_SERVICE = 4
IPVS_CMD_NEW_DEST = 5
IPVS_CMD_SET_DEST = 6
IPVS_CMD_DEL_DEST = 7
IPVS_CMD_GET_DEST = 8
IPVS_CMD_SET_CONFIG = 12
IPVS_CMD_GET_CONFIG = 13

# Each attribute's number is its place in its list.
COMMAND_ATTRIBUTES = (
    "IPVS_CMD_ATTR_UNSPEC",
    "IPVS_CMD_ATTR_SERVICE",
    "IPVS_CMD_ATTR_DEST",
    "IPVS_CMD_ATTR_DAEMON",
    "IPVS_CMD_ATTR_TIMEOUT_TCP",
    "IPVS_CMD_ATTR_TIMEOUT_TCP_FIN",
    "IPVS_CMD_ATTR_TIMEOUT_UDP",
)
SERVICE_ATTRIBUTES = (
    "IPVS_SVC_ATTR_UNSPEC",
    "IPVS_SVC_ATTR_AF",
    "IPVS_SVC_ATTR_PROTOCOL",
    "IPVS_SVC_ATTR_ADDR",
    "IPVS_SVC_ATTR_PORT",
    "IPVS_SVC_ATTR_FWMARK",
    "IPVS_SVC_ATTR_SCHED_NAME",
    "IPVS_SVC_ATTR_FLAGS",
    "IPVS_SVC_ATTR_TIMEOUT",
    "IPVS_SVC_ATTR_NETMASK",
    "IPVS_SVC_ATTR_STATS",
    "IPVS_SVC_ATTR_PE_NAME",
    "IPVS_SVC_ATTR_STATS64",
)
DEST_ATTRIBUTES = (
    "IPVS_DEST_ATTR_UNSPEC",
    "IPVS_DEST_ATTR_ADDR",
    "IPVS_DEST_ATTR_PORT",
    "IPVS_DEST_ATTR_FWD_METHOD",
    "IPVS_DEST_ATTR_WEIGHT",
    "IPVS_DEST_ATTR_U_THRESH",
    "IPVS_DEST_ATTR_L_THRESH",
    "IPVS_DEST_ATTR_ACTIVE_CONNS",
    "IPVS_DEST_ATTR_INACT_CONNS",
    "IPVS_DEST_ATTR_PERSIST_CONNS",
    "IPVS_DEST_ATTR_STATS",
    "IPVS_DEST_ATTR_ADDR_FAMILY",
    "IPVS_DEST_ATTR_STATS64",
    "IPVS_DEST_ATTR_TUN_TYPE",
    "IPVS_DEST_ATTR_TUN_PORT",
    "IPVS_DEST_ATTR_TUN_FLAGS",
)
# Both the 32-bit and the 64-bit counters.
STATS_ATTRIBUTES = (
    "IPVS_STATS_ATTR_UNSPEC",
    "IPVS_STATS_ATTR_CONNS",
    "IPVS_STATS_ATTR_INPKTS",
    "IPVS_STATS_ATTR_OUTPKTS",
    "IPVS_STATS_ATTR_INBYTES",
    "IPVS_STATS_ATTR_OUTBYTES",
    "IPVS_STATS_ATTR_CPS",
    "IPVS_STATS_ATTR_INPPS",
    "IPVS_STATS_ATTR_OUTPPS",
    "IPVS_STATS_ATTR_INBPS",
    "IPVS_STATS_ATTR_OUTBPS",
)
