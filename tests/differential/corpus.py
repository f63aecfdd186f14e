"""The named scenarios: every feature README lists, each with its changes over time.

Each builder returns, for a phase ("add", "modify", "scale"), the objects its scenario wants
then; ``lifecycle`` deletes what a phase no longer wants and, last, everything. Scenarios live
in namespaces of their own and use addresses of their own (external and load-balancer IPs
below), so all of them run side by side in one cluster, one phase of each per sync.
"""

from __future__ import annotations

from tests.differential.cluster import JsonObject
from tests.differential.objects import (
    endpoint,
    endpoint_slice,
    mirrored_node_hints,
    port,
    remote,
    service,
    slice_port,
    twins,
)
from tests.differential.profiles import ALL_PROFILES
from tests.differential.scenario import Scenario, lifecycle
from tests.differential.topology import HOST_PORT, NODE_A, NODE_B, NODE_C, POD_PORT
from tests.differential.traffic import Probe

Build = list[JsonObject]


def _ext(n: int) -> str:
    """An external IP of scenario ``n``'s own."""
    return f"203.0.113.{n}"


def _ext6(n: int) -> str:
    return f"2001:db8::{n:x}"


def _lb(n: int) -> str:
    """A load-balancer ingress IP of scenario ``n``'s own."""
    return f"198.51.100.{n}"


def _lb6(n: int) -> str:
    return f"2001:db8:1::{n:x}"


def _pods(
    phase: str, add: tuple[int, ...] = (1,), scale: tuple[int, ...] = (1, 2, 3)
) -> tuple[int, ...]:
    return scale if phase == "scale" else add


def _simple(
    ns: str, name: str, ports: list[JsonObject], endpoints: list[JsonObject], **spec: object
) -> Build:
    slice_ports = [slice_port(POD_PORT, p["protocol"], p["name"]) for p in ports]
    return [
        service(ns, name, ports, **spec),  # type: ignore[arg-type]
        endpoint_slice(ns, name, endpoints, slice_ports),
    ]


# -- service types ------------------------------------------------------------------------------


def cluster_ip(ns: str, phase: str) -> Build:
    number = 80 if phase == "add" else 8080
    return _simple(ns, "web", [port(number)], twins(*_pods(phase)) + remote(1))


def cluster_ip_udp(ns: str, phase: str) -> Build:
    ports = [port(53, "UDP", name="dns")]
    if phase != "add":
        ports.append(port(53, "TCP", name="dns-tcp"))
    return _simple(ns, "dns", ports, twins(*_pods(phase)))


def cluster_ip_sctp(ns: str, phase: str) -> Build:
    return _simple(ns, "sctp", [port(9000, "SCTP")], twins(*_pods(phase)) + remote(2))


def multi_port(ns: str, phase: str) -> Build:
    ports = [port(80, name="http"), port(53, "UDP", name="dns")]
    # modify: the slice names its port differently, so "dns" has no endpoints there
    slice_ports = [slice_port(POD_PORT, "TCP", "http"), slice_port(5353, "UDP", "dns")]
    if phase == "modify":
        slice_ports[1] = slice_port(5353, "UDP", "domain")
    return [
        service(ns, "multi", ports),
        endpoint_slice(ns, "multi", twins(*_pods(phase)) + remote(1), slice_ports),
    ]


def no_endpoints(ns: str, phase: str) -> Build:
    objects = [service(ns, "empty", [port(80)], kind="NodePort")]
    if phase == "modify":
        objects.append(endpoint_slice(ns, "empty", [], [slice_port()]))
    if phase == "scale":
        objects.append(endpoint_slice(ns, "empty", twins(1, 2, ready=False), [slice_port()]))
    return objects


def node_port(ns: str, phase: str) -> Build:
    protocol = "UDP" if phase == "modify" else "TCP"
    return _simple(ns, "web", [port(80, protocol)], twins(*_pods(phase)), type="NodePort")


def node_port_sctp(ns: str, phase: str) -> Build:
    return _simple(ns, "sctp", [port(9000, "SCTP")], twins(*_pods(phase)), type="NodePort")


def node_port_local(ns: str, phase: str) -> Build:
    # modify: no endpoint on either node, only remote ones (kubernetes #97081 fallback)
    endpoints = remote(1, 2) if phase == "modify" else twins(*_pods(phase)) + remote(1)
    return _simple(
        ns, "local", [port(80)], endpoints, type="NodePort", externalTrafficPolicy="Local"
    )


def node_port_dual(ns: str, phase: str) -> Build:
    pods = _pods(phase)
    return [
        service(ns, "dual", [port(80)], kind="NodePort", families=("IPv4", "IPv6")),
        endpoint_slice(ns, "dual", twins(*pods), [slice_port()]),
        endpoint_slice(ns, "dual", twins(*pods, family="IPv6"), [slice_port()], family="IPv6"),
    ]


def second_nic(ns: str, phase: str) -> Build:
    """NodePorts and the host's own address on a NIC the Node object does not list."""
    return _simple(ns, "nic", [port(80)], twins(*_pods(phase, (1, 2))), type="NodePort")


# -- load balancers ----------------------------------------------------------------------------


def load_balancer(ns: str, phase: str) -> Build:
    ingress = (_lb(10),) if phase == "add" else (_lb(10), _lb(11))
    return _simple(ns, "lb", [port(80)], twins(*_pods(phase)), type="LoadBalancer", ingress=ingress)


def lb_local(ns: str, phase: str) -> Build:
    endpoints = remote(1) if phase == "modify" else twins(*_pods(phase)) + remote(1)
    return _simple(
        ns,
        "lb",
        [port(80)],
        endpoints,
        type="LoadBalancer",
        externalTrafficPolicy="Local",
        ingress=(_lb(12),),
    )


def lb_ranges_node(ns: str, phase: str) -> Build:
    """Source ranges with the node in: it reaches the LB IP (KUBE-LOAD-BALANCER-SOURCE-IP)."""
    ranges = ["10.250.0.0/24", "10.252.0.2/32"] if phase != "modify" else ["10.250.0.0/16"]
    return _simple(
        ns,
        "lb",
        [port(80)],
        twins(*_pods(phase, (1, 2))),
        type="LoadBalancer",
        loadBalancerSourceRanges=ranges,
        ingress=(_lb(13),),
    )


def lb_ranges_other(ns: str, phase: str) -> Build:
    """Source ranges without the node: its traffic to the LB IP drops (KUBE-IPVS-OUT-FILTER)."""
    ranges = ["192.0.2.0/24"] if phase == "add" else ["192.0.2.0/24", "2001:db8:ff::/48"]
    return _simple(
        ns,
        "lb",
        [port(80, name="http"), port(443, name="tls")] if phase == "scale" else [port(80)],
        twins(*_pods(phase, (1, 2))),
        type="LoadBalancer",
        loadBalancerSourceRanges=ranges,
        ingress=(_lb(14),),
    )


def lb_proxy_mode(ns: str, phase: str) -> Build:
    mode = "Proxy" if phase != "modify" else "VIP"
    return _simple(
        ns,
        "lb",
        [port(80)],
        twins(*_pods(phase)),
        type="LoadBalancer",
        ingress=(_lb(15),),
        ingress_mode=mode,
    )


def lb_no_node_ports(ns: str, phase: str) -> Build:
    return _simple(
        ns,
        "lb",
        [port(80)],
        twins(*_pods(phase)),
        type="LoadBalancer",
        allocateLoadBalancerNodePorts=False,
        externalTrafficPolicy="Local" if phase != "add" else "Cluster",
        ingress=(_lb(16),),
    )


def lb_dual(ns: str, phase: str) -> Build:
    pods = _pods(phase)
    return [
        service(
            ns,
            "lb",
            [port(80)],
            kind="LoadBalancer",
            families=("IPv6", "IPv4"),
            externalTrafficPolicy="Local" if phase == "scale" else "Cluster",
            ingress=(_lb(17), _lb6(17)),
        ),
        endpoint_slice(ns, "lb", twins(*pods), [slice_port()]),
        endpoint_slice(ns, "lb", twins(*pods, family="IPv6"), [slice_port()], family="IPv6"),
    ]


def health_check_port_collision(ns: str, phase: str) -> Build:
    """A load balancer whose port is its own health-check node port, under source ranges
    that leave the client out: the firewall must drop before the health check accepts."""
    return _simple(
        ns,
        "lb",
        [port(31999)],
        twins(*_pods(phase, (1, 2))),
        type="LoadBalancer",
        externalTrafficPolicy="Local",
        healthCheckNodePort=31999,
        loadBalancerSourceRanges=["192.0.2.0/24"] if phase != "modify" else ["10.252.0.0/24"],
        ingress=(_lb(18),),
    )


def mixed_protocol(ns: str, phase: str) -> Build:
    ports = [port(53, "UDP", name="udp"), port(53, "TCP", name="tcp")]
    return _simple(ns, "lb", ports, twins(*_pods(phase)), type="LoadBalancer", ingress=(_lb(19),))


def unusable_ingress(ns: str, phase: str) -> Build:
    ingress = ("169.254.10.10",) if phase != "modify" else (_lb(20), "169.254.10.10")
    return _simple(ns, "lb", [port(80)], twins(1), type="LoadBalancer", ingress=ingress)


# -- external IPs --------------------------------------------------------------------------------


def external_ip(ns: str, phase: str) -> Build:
    ips = [_ext(21)] if phase == "add" else [_ext(21), _ext(22)]
    ports = [port(80, name="t")] + ([port(80, "UDP", name="u")] if phase != "add" else [])
    return _simple(ns, "ext", ports, twins(*_pods(phase, (1, 2))), externalIPs=ips)


def external_ip_local(ns: str, phase: str) -> Build:
    endpoints = remote(1) if phase == "modify" else twins(*_pods(phase))
    return _simple(
        ns,
        "ext",
        [port(80)],
        endpoints,
        type="NodePort",
        externalIPs=[_ext(23)],
        externalTrafficPolicy="Local",
    )


def external_ip_node_addresses(ns: str, phase: str) -> Build:
    """Each node's primary addresses as external IPs: served on the node that has them,
    bound on the other. Only in "modify": a node holding its twin's address would swallow
    the replies to it, and the traffic verdicts come after "add" and "scale"."""
    dual = phase == "modify"
    families = ("IPv4", "IPv6") if dual else ("IPv4",)
    ips = [NODE_A.ipv4, NODE_B.ipv4, NODE_A.ipv6, NODE_B.ipv6] if dual else []
    pods = _pods(phase)
    objects = [
        service(ns, "ext", [port(8081)], families=families, externalIPs=ips),
        endpoint_slice(ns, "ext", twins(*pods), [slice_port()]),
    ]
    if dual:
        v6 = twins(*pods, family="IPv6")
        objects.append(endpoint_slice(ns, "ext", v6, [slice_port()], family="IPv6"))
    return objects


def external_ip_second_nic(ns: str, phase: str) -> Build:
    """Each node's second-NIC address as an external IP: the node's own, though no Node lists it."""
    ips = [NODE_A.secondary_ipv4, NODE_B.secondary_ipv4]
    return _simple(ns, "ext", [port(8082)], twins(*_pods(phase, (1, 2))), externalIPs=ips)


def external_ip_dual(ns: str, phase: str) -> Build:
    pods = _pods(phase)
    return [
        service(
            ns, "ext", [port(80)], families=("IPv4", "IPv6"), externalIPs=[_ext(24), _ext6(24)]
        ),
        endpoint_slice(ns, "ext", twins(*pods), [slice_port()]),
        endpoint_slice(ns, "ext", twins(*pods, family="IPv6"), [slice_port()], family="IPv6"),
    ]


def conflicting_external_ip(ns: str, phase: str) -> Build:
    """Two services claim one external IP and port: kube-proxy's last writer, our older one."""
    first = _simple(ns, "first", [port(80)], twins(1), externalIPs=[_ext(25)])
    if phase == "modify":
        return first
    second = _simple(ns, "second", [port(80)], twins(2) + remote(3), externalIPs=[_ext(25)])
    return first + second


# -- traffic policies, endpoint conditions, affinity -----------------------------------------------


def internal_local(ns: str, phase: str) -> Build:
    endpoints = remote(1) if phase == "modify" else twins(*_pods(phase)) + remote(2)
    return _simple(ns, "itp", [port(80)], endpoints, internalTrafficPolicy="Local")


def both_local(ns: str, phase: str) -> Build:
    endpoints = remote(1, 2) if phase == "scale" else twins(1) + remote(1)
    return _simple(
        ns,
        "local",
        [port(80)],
        endpoints,
        type="NodePort",
        internalTrafficPolicy="Local",
        externalTrafficPolicy="Local",
    )


def affinity(ns: str, phase: str) -> Build:
    config = None if phase == "add" else {"clientIP": {"timeoutSeconds": 60}}
    spec: dict[str, object] = {"sessionAffinity": "ClientIP"}
    if config:
        spec["sessionAffinityConfig"] = config
    return _simple(ns, "sticky", [port(80)], twins(*_pods(phase)), type="NodePort", **spec)


def affinity_toggle(ns: str, phase: str) -> Build:
    spec = "ClientIP" if phase == "modify" else "None"
    return _simple(
        ns, "sticky", [port(80)], twins(1, 2), sessionAffinity=spec, externalIPs=[_ext(26)]
    )


def terminating(ns: str, phase: str) -> Build:
    if phase == "add":
        endpoints = twins(1, 2, ready=False, serving=True, terminating=True)
    elif phase == "modify":
        endpoints = twins(1, ready=False, serving=True, terminating=True) + remote(1)
    else:
        endpoints = twins(1, 2, ready=False, serving=False, terminating=True)
    return _simple(ns, "term", [port(80)], endpoints, type="NodePort")


def terminating_local(ns: str, phase: str) -> Build:
    endpoints = twins(1, ready=False, serving=True, terminating=True)
    if phase == "modify":
        endpoints += remote(2)
    return _simple(
        ns, "term", [port(80)], endpoints, type="NodePort", externalTrafficPolicy="Local"
    )


def conditions(ns: str, phase: str) -> Build:
    endpoints = (
        twins(1)
        + twins(2, ready=False)
        + twins(3, ready=False, serving=True)
        + remote(4, ready=True, serving=True, terminating=True)
    )
    if phase == "modify":
        endpoints = twins(2, ready=False) + twins(3, ready=False, serving=False, terminating=True)
    return _simple(ns, "cond", [port(80)], endpoints)


def dual_stack(ns: str, phase: str) -> Build:
    pods = _pods(phase)
    objects = [
        service(ns, "dual", [port(80)], families=("IPv4", "IPv6")),
        endpoint_slice(ns, "dual", twins(*pods) + remote(1), [slice_port()]),
    ]
    if phase != "modify":
        v6 = twins(*pods, family="IPv6") + remote(1, family="IPv6")
        objects.append(endpoint_slice(ns, "dual", v6, [slice_port()], family="IPv6"))
    return objects


def ipv6_only(ns: str, phase: str) -> Build:
    pods = _pods(phase)
    return [
        service(ns, "six", [port(80)], kind="NodePort", families=("IPv6",)),
        endpoint_slice(ns, "six", twins(*pods, family="IPv6"), [slice_port()], family="IPv6"),
    ]


def topology_zone(ns: str, phase: str) -> Build:
    zone = "zone-1" if phase != "modify" else "zone-9"
    endpoints = [
        endpoint(node, n, for_zones=(zone,)) for n in (1, 2) for node in (NODE_A, NODE_B)
    ] + [endpoint(NODE_C, 3, zone="zone-2", for_zones=("zone-2",))]
    return _simple(ns, "zonal", [port(80)], endpoints)


def topology_node(ns: str, phase: str) -> Build:
    endpoints = mirrored_node_hints(1, 2) + (remote(3) if phase == "modify" else [])
    return _simple(ns, "nodal", [port(80)], endpoints, trafficDistribution="PreferSameNode")


def hairpin(ns: str, phase: str) -> Build:
    return _simple(ns, "hairpin", [port(80, name="t"), port(81, "UDP", name="u")], twins(1))


# -- what the proxies leave alone, and odd inputs -----------------------------------------------


def headless(ns: str, phase: str) -> Build:
    return _simple(ns, "headless", [port(80)], twins(*_pods(phase)), clusterIP="None")


def external_name(ns: str, phase: str) -> Build:
    host = "example.com" if phase == "add" else "example.org"
    return [service(ns, "name", [port(80)], kind="ExternalName", externalName=host)]


def other_proxy(ns: str, phase: str) -> Build:
    label = {"service.kubernetes.io/service-proxy-name": "other"} if phase != "modify" else {}
    return [
        service(ns, "other", [port(80)], labels=label),
        endpoint_slice(ns, "other", twins(1), [slice_port()]),
    ]


def slice_port_mismatch(ns: str, phase: str) -> Build:
    name = "wrong" if phase != "modify" else "http"
    return [
        service(ns, "mismatch", [port(80, name="http")]),
        endpoint_slice(ns, "mismatch", twins(1), [slice_port(POD_PORT, "TCP", name)]),
    ]


def many_slices(ns: str, phase: str) -> Build:
    second = twins(2, 3) + twins(1) if phase != "modify" else twins(4)
    return [
        service(ns, "split", [port(80)]),
        endpoint_slice(ns, "split", twins(1), [slice_port()], name="split-a"),
        endpoint_slice(ns, "split", second, [slice_port()], name="split-b"),
    ]


def fqdn_slice(ns: str, phase: str) -> Build:
    fqdn = {
        "kind": "EndpointSlice",
        "metadata": {
            "name": "fqdn",
            "namespace": ns,
            "labels": {"kubernetes.io/service-name": "f"},
        },
        "addressType": "FQDN",
        "endpoints": [{"addresses": ["pod.example.com"], "conditions": {"ready": True}}],
        "ports": [slice_port()],
    }
    return [service(ns, "f", [port(80)]), fqdn] + (
        [endpoint_slice(ns, "f", twins(1), [slice_port()])] if phase == "scale" else []
    )


def scale_many(ns: str, phase: str) -> Build:
    count = {"add": 3, "modify": 10, "scale": 20}[phase]
    return _simple(ns, "many", [port(80)], remote(*range(1, count + 1)) + twins(1), type="NodePort")


def type_change(ns: str, phase: str) -> Build:
    kind = {"add": "ClusterIP", "modify": "NodePort", "scale": "LoadBalancer"}[phase]
    extra: dict[str, object] = {"type": kind}
    if kind == "LoadBalancer":
        extra["ingress"] = (_lb(27),)
    return _simple(ns, "shape", [port(80)], twins(1, 2), **extra)


def scheduler_annotation(ns: str, phase: str) -> Build:
    scheduler = "lc" if phase != "modify" else "sh"
    return _simple(
        ns,
        "sched",
        [port(80)],
        twins(1),
        annotations={"ipvsproxy.io/scheduler": scheduler},
    )


def excluded_range(ns: str, phase: str) -> Build:
    """An external IP inside --ipvs-exclude-cidrs (the masquerade profile's 10.99.0.0/16)."""
    return _simple(ns, "excluded", [port(80)], twins(1), externalIPs=["10.99.0.50"])


# -- traffic: verdicts as well as rules ---------------------------------------------------------
# Endpoints here are the twin pods that serve (1 and 2), so every answer comes from a pod.


def traffic_cluster_ip(ns: str, phase: str) -> Build:
    ports = [port(80, name="t"), port(81, "UDP", name="u")]
    return _simple(ns, "svc", ports, twins(*_pods(phase, (1,), (1, 2))))


def traffic_node_port(ns: str, phase: str) -> Build:
    return _simple(ns, "svc", [port(80)], twins(*_pods(phase, (1,), (1, 2))), type="NodePort")


def traffic_external_ip(ns: str, phase: str) -> Build:
    return _simple(ns, "svc", [port(80)], twins(1, 2), externalIPs=[_ext(40)])


def traffic_source_ranges(ns: str, phase: str) -> Build:
    def ranged(name: str, source_range: str, ingress: int) -> Build:
        return _simple(
            ns,
            name,
            [port(80)],
            twins(1, 2),
            type="LoadBalancer",
            loadBalancerSourceRanges=[source_range],
            ingress=(_lb(ingress),),
        )

    return ranged("allowed", "10.252.0.2/32", 40) + ranged("denied", "192.0.2.0/24", 41)


def traffic_hairpin(ns: str, phase: str) -> Build:
    return _simple(ns, "svc", [port(80)], twins(1))


def traffic_health_check_collision(ns: str, phase: str) -> Build:
    return _simple(
        ns,
        "svc",
        [port(31998)],
        twins(1, 2),
        type="LoadBalancer",
        externalTrafficPolicy="Local",
        healthCheckNodePort=31998,
        loadBalancerSourceRanges=["192.0.2.0/24"],
        ingress=(_lb(42),),
    )


def probe(
    scenario: str, name: str, client: str, target: str, service: str = "svc", **extra: object
) -> Probe:
    return Probe(name, client, f"s-{scenario}/{service}", target, **extra)  # type: ignore[arg-type]


def core(name: str, covers: str, build: object) -> Scenario:
    """A scenario every profile runs."""
    return lifecycle(name, covers, build, profiles=ALL_PROFILES)  # type: ignore[arg-type]


SCENARIOS: tuple[Scenario, ...] = (
    core("cluster-ip", "ClusterIP: port change, scale", cluster_ip),
    lifecycle("cluster-ip-udp", "ClusterIP UDP, a TCP port added", cluster_ip_udp),
    lifecycle("cluster-ip-sctp", "ClusterIP SCTP", cluster_ip_sctp),
    lifecycle("multi-port", "named ports, a slice port renamed", multi_port),
    lifecycle("no-endpoints", "no slice, an empty one, not-ready ones", no_endpoints),
    core(
        "node-port",
        "NodePort TCP, then UDP",
        node_port,
    ),
    core("node-port-sctp", "NodePort SCTP (hash:ip,port with node addresses)", node_port_sctp),
    lifecycle("node-port-local", "externalTrafficPolicy Local, fallback #97081", node_port_local),
    core("node-port-dual", "dual-stack NodePort", node_port_dual),
    lifecycle("second-nic", "a NIC the Node object does not list", second_nic),
    lifecycle("load-balancer", "LoadBalancer ingress IPs", load_balancer),
    core("lb-local", "LoadBalancer Local, health-check node port", lb_local),
    core("lb-ranges-node", "source ranges with the node", lb_ranges_node),
    lifecycle("lb-ranges-other", "source ranges without the node", lb_ranges_other),
    lifecycle("lb-proxy-mode", "ingress ipMode Proxy", lb_proxy_mode),
    core("lb-no-node-ports", "allocateLoadBalancerNodePorts false", lb_no_node_ports),
    lifecycle("lb-dual", "dual-stack LoadBalancer, IPv6 first", lb_dual),
    core("hc-port-collision", "LB port = health-check node port", health_check_port_collision),
    lifecycle("mixed-protocol", "one port number, TCP and UDP", mixed_protocol),
    lifecycle("unusable-ingress", "a link-local ingress IP", unusable_ingress),
    core("external-ip", "externalIPs, a UDP port added", external_ip),
    lifecycle("external-ip-local", "externalIPs with Local policy", external_ip_local),
    lifecycle("external-ip-node", "externalIPs = node addresses", external_ip_node_addresses),
    lifecycle("external-ip-nic", "externalIPs = second-NIC addresses", external_ip_second_nic),
    lifecycle("external-ip-dual", "dual-stack externalIPs", external_ip_dual),
    lifecycle("conflict", "two services, one external IP:port", conflicting_external_ip),
    lifecycle("internal-local", "internalTrafficPolicy Local", internal_local),
    lifecycle("both-local", "both traffic policies Local", both_local),
    core("affinity", "ClientIP affinity, timeout change", affinity),
    lifecycle("affinity-toggle", "affinity on and off", affinity_toggle),
    lifecycle("terminating", "serving-terminating fallback", terminating),
    lifecycle("terminating-local", "terminating fallback under Local", terminating_local),
    lifecycle("conditions", "ready, serving, terminating mixed", conditions),
    core("dual-stack", "RequireDualStack, an IPv6 slice gone", dual_stack),
    lifecycle("ipv6-only", "SingleStack IPv6 NodePort", ipv6_only),
    lifecycle("topology-zone", "zone hints", topology_zone),
    lifecycle("topology-node", "node hints, PreferSameNode", topology_node),
    lifecycle("hairpin", "pods reaching themselves", hairpin),
    lifecycle("headless", "headless: nothing", headless),
    lifecycle("external-name", "ExternalName: nothing", external_name),
    lifecycle("other-proxy", "service-proxy-name label", other_proxy),
    lifecycle("port-mismatch", "slice port named otherwise", slice_port_mismatch),
    lifecycle("many-slices", "endpoints over two slices, duplicates", many_slices),
    lifecycle("fqdn-slice", "an FQDN slice", fqdn_slice),
    lifecycle("scale-many", "3, 10, 20 endpoints", scale_many),
    lifecycle("type-change", "ClusterIP to NodePort to LoadBalancer", type_change),
    lifecycle("scheduler-annotation", "ipvsproxy.io/scheduler", scheduler_annotation),
    lifecycle("excluded-range", "--ipvs-exclude-cidrs", excluded_range, profiles=("masquerade",)),
    lifecycle(
        "traffic-cluster-ip",
        "ClusterIP traffic from a pod and from the node; a host port on the VIP",
        traffic_cluster_ip,
        traffic=(
            probe("traffic-cluster-ip", "cluster IP from a pod", "pod", "cluster-ip"),
            probe(
                "traffic-cluster-ip",
                "cluster IP UDP from a pod",
                "pod",
                "cluster-ip",
                protocol="UDP",
            ),
            probe("traffic-cluster-ip", "cluster IP from the node", "node", "cluster-ip"),
            probe(
                "traffic-cluster-ip",
                "host port on the cluster IP",
                "outside",
                "cluster-ip",
                port=HOST_PORT,
                attempts=1,
            ),
        ),
    ),
    lifecycle(
        "traffic-node-port",
        "NodePort from outside, on both NICs",
        traffic_node_port,
        traffic=(
            probe("traffic-node-port", "NodePort from outside", "outside", "node-port"),
            probe("traffic-node-port", "NodePort on the second NIC", "outside", "node-port-nic"),
            probe("traffic-node-port", "NodePort from a pod", "pod", "node-port"),
        ),
    ),
    lifecycle(
        "traffic-external-ip",
        "ExternalIP from outside",
        traffic_external_ip,
        traffic=(
            probe("traffic-external-ip", "external IP from outside", "outside", "external-ip"),
        ),
    ),
    lifecycle(
        "traffic-source-ranges",
        "source ranges: one client allowed, one range without it",
        traffic_source_ranges,
        traffic=(
            probe(
                "traffic-source-ranges",
                "allowed client",
                "outside",
                "load-balancer",
                service="allowed",
            ),
            probe(
                "traffic-source-ranges",
                "client outside the ranges",
                "outside",
                "load-balancer",
                service="denied",
                attempts=1,
            ),
            probe(
                "traffic-source-ranges",
                "pod outside the ranges",
                "pod",
                "load-balancer",
                service="allowed",
                attempts=1,
            ),
        ),
    ),
    lifecycle(
        "traffic-hairpin",
        "a pod reaching itself through its service",
        traffic_hairpin,
        traffic=(probe("traffic-hairpin", "hairpin", "pod", "cluster-ip"),),
    ),
    lifecycle(
        "traffic-hc-collision",
        "LB port = health-check node port, client outside the ranges",
        traffic_health_check_collision,
        traffic=(
            probe(
                "traffic-hc-collision",
                "LB on its health-check port",
                "outside",
                "load-balancer",
                attempts=1,
            ),
        ),
    ),
)
