"""The proxy configurations the differential run compares under.

Besides the defaults, four profiles cover every other KubeProxyConfiguration setting README
lists, grouped so that no setting hides another: each --detect-local-mode, each kind of
--nodeport-addresses (CIDRs, ``primary``, CIDRs matching no node address), --masquerade-all,
--ipvs-strict-arp, --ipvs-exclude-cidrs (with someone else's virtual server in the range),
the IPVS timeouts and the schedulers that change a virtual server's flags.
"""

from __future__ import annotations

from tests.differential.proxies import Profile

# A profile beside the defaults runs its scenarios' richest phase, then deletes them: what it
# changes shows in the rules of whatever exists, and each round costs kube-proxy a sync.
SHORT = ("scale", "delete")

PROFILES: dict[str, Profile] = {
    profile.name: profile
    for profile in (
        Profile("default"),
        Profile(
            "masquerade",
            rounds=SHORT,
            masquerade_all=True,
            strict_arp=True,
            exclude_cidrs=("10.99.0.0/16", "fd00:99::/64"),
            foreign_virtual_servers=("-A -t 10.99.0.1:80 -s wlc", "-A -u [fd00:99::1]:53 -s rr"),
            tcp_timeout="800s",
            tcp_fin_timeout="60s",
            udp_timeout="100s",
            scheduler="wrr",
        ),
        Profile(
            "node-cidr",
            rounds=SHORT,
            detect_local_mode="NodeCIDR",
            nodeport_addresses=("10.250.0.0/24", "fd00:251::/64"),
        ),
        Profile(
            "bridge",
            rounds=SHORT,
            detect_local_mode="BridgeInterface",
            bridge_interface="cbr0",
            nodeport_addresses=("primary",),
            scheduler="mh",
        ),
        Profile(
            "prefix",
            rounds=SHORT,
            detect_local_mode="InterfaceNamePrefix",
            interface_name_prefix="veth",
            nodeport_addresses=("172.31.0.0/16",),
            cluster_cidr="",
        ),
    )
}
ALL_PROFILES = tuple(PROFILES)
