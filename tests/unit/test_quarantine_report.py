"""What the daemon tells of quarantine: a log line per change of state, metrics, Events."""

from __future__ import annotations

import errno
import logging
import os

import pytest

from ipvsproxy.cluster.events import ObjectReference
from ipvsproxy.daemon.metrics import Metrics
from ipvsproxy.daemon.quarantine_report import QuarantineReport, owner_of
from ipvsproxy.model import (
    ObjectKey,
    OpError,
    RealServerRef,
    Service,
    ServicePortName,
    ServiceType,
    TransportProtocol,
    VirtualServer,
)
from ipvsproxy.reconcile.held import IPSetMember, Parameter
from ipvsproxy.reconcile.quarantine import Change, Entry, Quarantine, Transition
from tests.unit.reconcile_kit import POD_A, TCP_VS, desired

WEB = ObjectKey("default", "web")
REFUSAL = OpError(errno.ENOENT, os.strerror(errno.ENOENT))


def entry(attempts: int = 1) -> Entry:
    return Entry(VirtualServer(TCP_VS, "sed"), REFUSAL, "scheduler_unavailable", attempts, 5.0)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[ObjectReference, str, str, str]] = []

    def event(self, involved: ObjectReference, type_: str, reason: str, message: str) -> None:
        self.events.append((involved, type_, reason, message))


def test_held_objects_are_owned_by_the_service_port_of_their_virtual_server() -> None:
    state = desired({TCP_VS: [POD_A]})
    owner = ServicePortName(WEB, "http", TransportProtocol.TCP)
    assert owner_of(TCP_VS, state) == owner
    assert owner_of(RealServerRef(TCP_VS, POD_A.key), state) == owner
    assert owner_of(IPSetMember("KUBE-CLUSTER-IP", "10.96.0.10,tcp:80"), state) == owner
    assert owner_of(IPSetMember("KUBE-NODE-PORT-TCP", "30080"), state) is None
    assert owner_of(Parameter("net.ipv4.vs.conntrack"), state) is None


def test_each_change_of_state_is_one_line_one_count_and_one_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics()
    recorder = Recorder()
    report = QuarantineReport(metrics, recorder)
    state = desired({TCP_VS: [POD_A]})
    services = {WEB: Service(WEB, ServiceType.CLUSTER_IP, uid="uid-web")}
    went_in = Transition(TCP_VS, Change.QUARANTINED, entry())
    came_out = Transition(TCP_VS, Change.RELEASED, entry(3), applied=True)
    gone = Transition(Parameter("net.ipv4.vs.conntrack"), Change.RELEASED, entry(), applied=False)

    with caplog.at_level(logging.INFO):
        report.report((went_in,), Quarantine(), state, services)
        report.report((), Quarantine(), state, services)
        report.report((came_out, gone), Quarantine(), state, services)

    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        "kernel refused: virtual server TCP 10.96.0.10:80 of default/web:http: No such file or "
        "directory (scheduler_unavailable); quarantined, retried with backoff",
        "released from quarantine: virtual server TCP 10.96.0.10:80 of default/web:http, taken "
        "after 3 tries",
        "released from quarantine: kernel parameter net.ipv4.vs.conntrack, no longer wanted",
    ]
    labels = {"kind": "virtual_server", "reason": "scheduler_unavailable"}
    assert metrics.registry.get_sample_value("ipvsproxy_objects_quarantined_total", labels) == 1
    assert [(ref.uid, kind, reason) for ref, kind, reason, _ in recorder.events] == [
        ("uid-web", "Warning", "KernelRefused"),
        ("uid-web", "Normal", "KernelAccepted"),
    ]
