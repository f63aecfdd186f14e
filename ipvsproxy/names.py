"""The names every layer shares: the label and annotation the proxy reads on a Service, and
kube-proxy's ipset names. Here, beside ``model``, so that ``cluster`` and ``reconcile`` use them
without importing ``translate``."""

from __future__ import annotations

from collections.abc import Mapping

from ipvsproxy.model import IPFamily

# kube-proxy's: a Service with this label is served only by the proxy of that name.
PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name"
# Ours: the IPVS scheduler of one Service.
SCHEDULER_ANNOTATION = "ipvsproxy.io/scheduler"

MAX_SET_NAME = 31

# name -> (type, comment), in kube-proxy's ipsetInfo order.
SETS: Mapping[str, tuple[str, str]] = {
    "KUBE-LOOP-BACK": (
        "hash:ip,port,ip",
        "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose",
    ),
    "KUBE-CLUSTER-IP": (
        "hash:ip,port",
        "Kubernetes service cluster ip + port for masquerade purpose",
    ),
    "KUBE-EXTERNAL-IP": (
        "hash:ip,port",
        "Kubernetes service external ip + port for masquerade and filter purpose",
    ),
    "KUBE-EXTERNAL-IP-LOCAL": (
        "hash:ip,port",
        "Kubernetes service external ip + port with externalTrafficPolicy=local",
    ),
    "KUBE-LOAD-BALANCER": ("hash:ip,port", "Kubernetes service lb portal"),
    "KUBE-LOAD-BALANCER-FW": (
        "hash:ip,port",
        "Kubernetes service load balancer ip + port for load balancer with sourceRange",
    ),
    "KUBE-LOAD-BALANCER-LOCAL": (
        "hash:ip,port",
        "Kubernetes service load balancer ip + port with externalTrafficPolicy=local",
    ),
    "KUBE-LOAD-BALANCER-SOURCE-IP": (
        "hash:ip,port,ip",
        "Kubernetes service load balancer ip + port + source IP for packet filter purpose",
    ),
    "KUBE-LOAD-BALANCER-SOURCE-CIDR": (
        "hash:ip,port,net",
        "Kubernetes service load balancer ip + port + source cidr for packet filter purpose",
    ),
    "KUBE-NODE-PORT-TCP": ("bitmap:port", "Kubernetes nodeport TCP port for masquerade purpose"),
    "KUBE-NODE-PORT-LOCAL-TCP": (
        "bitmap:port",
        "Kubernetes nodeport TCP port with externalTrafficPolicy=local",
    ),
    "KUBE-NODE-PORT-UDP": ("bitmap:port", "Kubernetes nodeport UDP port for masquerade purpose"),
    "KUBE-NODE-PORT-LOCAL-UDP": (
        "bitmap:port",
        "Kubernetes nodeport UDP port with externalTrafficPolicy=local",
    ),
    "KUBE-NODE-PORT-SCTP-HASH": (
        "hash:ip,port",
        "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'",
    ),
    "KUBE-NODE-PORT-LOCAL-SCTP-HASH": (
        "hash:ip,port",
        "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'",
    ),
    "KUBE-HEALTH-CHECK-NODE-PORT": ("bitmap:port", "Kubernetes health check node port"),
    "KUBE-IPVS-IPS": ("hash:ip", "Addresses on the ipvs interface"),
}


def set_name(base: str, family: IPFamily) -> str:
    """kube-proxy's name, cut to the 31 characters the kernel takes as kube-proxy cuts it."""
    if family is IPFamily.IPV4:
        return base
    return base.replace("KUBE-", "KUBE-6-", 1)[:MAX_SET_NAME]
