"""On the lab's kernel: the daemon's HTTP servers on an unspecified address answer on IPv4 and
IPv6 alike, as kube-proxy's do (Go listens on both for "0.0.0.0:10256"), so a load balancer
that health-checks a node over IPv6 gets an answer; a specific address serves itself alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ipvsproxy.daemon.http import HttpHub, Response
from ipvsproxy.daemon.nodeports import HealthCheckNodePorts
from ipvsproxy.model import ObjectKey
from ipvsproxy.supervise import Supervisor
from tests.lab.daemon import free_port
from tests.lab.netns import Client
from tests.lab.traffic import http_get

LOOPBACKS = ("127.0.0.1", "::1")


def _ok() -> Response:
    return Response(200, "text/plain", b"ok")


@pytest.fixture
def hub() -> Iterator[HttpHub]:
    workers = Supervisor()
    served = HttpHub(workers)
    served.start()
    yield served
    served.stop()
    workers.stop()


@pytest.mark.parametrize("host", ["0.0.0.0", "", "::"])
def test_an_unspecified_host_serves_both_families(hub: HttpHub, host: str) -> None:
    server = hub.serve(host, 0, {"/healthz": _ok})
    answers = [http_get(Client(None), a, server.port, "/healthz") for a in LOOPBACKS]
    assert [(reply.status, reply.body) for reply in answers] == [(200, "ok"), (200, "ok")]


def test_a_specific_address_serves_that_address_alone(hub: HttpHub) -> None:
    server = hub.serve("127.0.0.1", 0, {"/healthz": _ok})
    assert http_get(Client(None), "127.0.0.1", server.port, "/healthz").status == 200
    with pytest.raises(ConnectionRefusedError):
        http_get(Client(None), "::1", server.port, "/healthz")


def test_health_check_node_ports_answer_on_both_families(hub: HttpHub) -> None:
    service, port = ObjectKey("default", "web"), free_port()
    ports = HealthCheckNodePorts(hub)
    ports.update({service: port}, {service: 2})
    try:
        replies = [http_get(Client(None), a, port, "/") for a in LOOPBACKS]
    finally:
        ports.stop()
    assert [reply.status for reply in replies] == [200, 200]
    assert all('"localEndpoints": 2' in reply.body for reply in replies)


def test_health_check_node_ports_listen_on_the_hosts_given_and_move_with_them(
    hub: HttpHub,
) -> None:
    service, port = ObjectKey("default", "web"), free_port()
    ports = HealthCheckNodePorts(hub)
    try:
        ports.update({service: port}, {service: 1}, ["127.0.0.1"])
        assert http_get(Client(None), "127.0.0.1", port, "/").status == 200
        with pytest.raises(ConnectionRefusedError):
            http_get(Client(None), "::1", port, "/")

        ports.update({service: port}, {service: 1}, None)
        assert [http_get(Client(None), a, port, "/").status for a in LOOPBACKS] == [200, 200]
    finally:
        ports.stop()
