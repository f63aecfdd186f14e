"""kube-proxy's ``--init-only``: set the node's kernel parameters, and nothing else.

A container without privileges sees /proc/sys read-only. A privileged init container sets
the parameters once before the proxy starts (kube-proxy's and Cilium's way), so the proxy's
own full syncs find nothing to write; one that changes later is refused to the unprivileged
proxy, named and counted, without making later syncs full.
"""

from __future__ import annotations

from ipvsproxy.kernel.protocols import Kernel
from ipvsproxy.reconcile.apply import ApplyOutcome, apply_plan
from ipvsproxy.reconcile.ipvs_plan import IPVSPlan
from ipvsproxy.reconcile.parameters import plan_sysctls, plan_timeouts
from ipvsproxy.reconcile.reconciler import ReconcilerSettings
from ipvsproxy.reconcile.state import read_parameters
from ipvsproxy.reconcile.syncplan import SyncPlan


def plan_parameters(kernel: Kernel, settings: ReconcilerSettings) -> SyncPlan:
    """The sysctls and IPVS timeouts a full sync would set, alone."""
    return SyncPlan(
        sysctls=plan_sysctls(
            read_parameters(kernel.sysctl),
            strict_arp=settings.strict_arp,
            conntrack=settings.conntrack,
        ),
        interface=settings.interface,
        create_interface=False,
        bind=(),
        ipsets=(),
        iptables=(),
        timeouts=plan_timeouts(settings.ipvs_timeouts, kernel.ipvs.timeouts()),
        ipvs=IPVSPlan(),
        unbind=(),
    )


def initialize(kernel: Kernel, settings: ReconcilerSettings) -> ApplyOutcome:
    return apply_plan(kernel, plan_parameters(kernel, settings))
