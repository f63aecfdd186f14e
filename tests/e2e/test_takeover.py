"""A node taken over from the real kube-proxy (IPVS mode) and handed back, under live load.

The proof of README's Install procedure (``tests/lab/takeover.py`` runs it): etcd and
kube-apiserver in the lab, kube-proxy programming 1,000 Services, short requests to three
cluster IPs, a NodePort and an external IP, long-lived connections, UDP request/response and a
client with session affinity; kube-proxy stopped with SIGTERM and ``ipvsproxy run`` started on
its file without cleanup, then the same backwards. It prints one line per switch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ipvsproxy.cli import main
from tests.controlplane.build import located
from tests.lab.apiserver import RealApiServer
from tests.lab.controlplane import lab_binaries
from tests.lab.netns import Node
from tests.lab.takeover import run_takeover

SERVICES = 1000
# kube-proxy's binary on the lab's tmpfs: from hostfs each of its pages is read across when
# first touched, and Go starts slowly enough inside the lab as it is.
KUBE_PROXY_FOLDER = Path("/run/ipvsproxy-kube-proxy")


# About 11 minutes in a lab boot, the other e2e tests about 20 s each: a boot of its own.
@pytest.mark.lab_weight(30)
def test_a_node_is_taken_over_from_kube_proxy_and_handed_back_without_a_failed_request(
    node: Node,
    api: RealApiServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    built = located()
    assert built is not None, "the lab's control plane runs on these binaries"
    binaries = lab_binaries(built, KUBE_PROXY_FOLDER, ("kube-proxy",))
    try:
        outcome = run_takeover(api.control_plane, binaries, node, tmp_path, services=SERVICES)
    finally:
        # kube-proxy's state or ours: the node goes back to the other tests clean.
        CliRunner().invoke(main, ["cleanup"])
    takeover, handback = outcome.takeover, outcome.handback
    with capsys.disabled():
        print(
            f"\n{outcome.services} services created in {outcome.seconds_to_create:.0f} s, "
            f"kube-proxy's first sync {outcome.kube_proxy_first_sync:.0f} s after its start"
        )
        for switch in (takeover, handback):
            print(switch.details())
        print(takeover.line())
        print(handback.line())

    assert outcome.check_status == 0, outcome.check_output
    for switch in (takeover, handback):
        report = switch.report
        assert report.failed == [], f"{switch.name}: {report.failed[:10]}"
        # A TCP retransmission means a packet was dropped on the way, even if the request
        # then succeeded: a brief black hole.
        assert report.retransmitted == [], f"{switch.name}: {report.retransmitted[:10]}"
        assert report.long_lived_lost == [], f"{switch.name}: {report.long_lived_lost}"
        assert report.long_lived_kept > 0 and report.requests > 0
    # One backend for the sticky client from before the takeover to after the hand-back.
    assert len(takeover.report.affinity_backends | handback.report.affinity_backends) == 1
    # Every IPVS write at the takeover was one the check announced.
    assert sorted(takeover.ipvs_writes) == sorted(outcome.predicted)
