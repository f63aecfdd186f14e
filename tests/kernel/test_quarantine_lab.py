"""On the real kernel: a Service whose scheduler module the kernel cannot load costs only itself.

The lab has every scheduler module, so the test makes one unloadable itself: it unloads
ip_vs_sed and points kernel.modprobe at a loader of its own that refuses that one module (and
loads any other from the lab's modules), then checks the kernel now refuses a "sed" virtual
server. The daemon then runs against a fake API server with 50 services, one annotated with
"sed": that one waits in quarantine, counted and reported on the Service as an Event, while
every later change is applied by an incremental sync.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from ipvsproxy.kernel.sysctl import ProcSysctl
from tests.daemon_kit import cluster, endpoint_slice, service, service_ip
from tests.kernel.conftest import MODULE_LOADER
from tests.lab.apiserver import LabApiServer
from tests.lab.daemon import Daemon, cleaned_up
from tests.lab.kernel_state import ipvs_table
from tests.lab.modules import delete_virtual_servers, loaded, unload
from tests.lab.traffic import APPLY_TIMEOUT, wait_until

SCHEDULER = "sed"
MODULE = f"ip_vs_{SCHEDULER}"
REFUSED_INDEX = 7
# A Service's virtual server, as ipvsadm -Sn lists it.
LISTED = "-A -t {address}:80 -s {scheduler}"
IN_QUARANTINE = "ipvsproxy_objects_in_quarantine"
QUARANTINED = "ipvsproxy_objects_quarantined_total"
SYNCS = "ipvsproxy_syncs_total"
UNAVAILABLE = {"kind": "virtual_server", "reason": "scheduler_unavailable"}


def annotated(index: int, scheduler: str) -> dict[str, Any]:
    obj = service(index)
    obj["metadata"]["annotations"] = {"ipvsproxy.io/scheduler": scheduler}
    return obj


@pytest.fixture
def unloadable(module_loader: ProcSysctl, tmp_path: Path) -> Iterator[Path]:
    """ip_vs_sed not loaded, and kernel.modprobe refusing to load it (module_loader puts the
    loader back, and loads again what the test unloaded, afterwards). Yields the file in
    which the loader writes one line each time the kernel asks it for ip_vs_sed."""
    delete_virtual_servers(SCHEDULER)
    unload(MODULE)
    lab_loader = module_loader.get(MODULE_LOADER)
    asked = tmp_path / "asked"
    asked.touch()
    refusing = tmp_path / "modprobe-refusing"
    refusing.write_text(
        "#!/bin/sh\n"
        f'for argument in "$@"; do [ "$argument" = {MODULE} ] && echo >> {asked} && exit 1; done\n'
        f'exec {lab_loader} "$@"\n'
    )
    refusing.chmod(0o755)
    module_loader.set(MODULE_LOADER, str(refusing))
    # What the test set up holds: the kernel cannot give a virtual server that scheduler.
    probe = ["ipvsadm", "-A", "-t", "198.18.0.9:9", "-s", SCHEDULER]
    tried = subprocess.run(probe, capture_output=True, text=True, check=False)
    assert tried.returncode != 0, "the kernel took a sed virtual server"
    assert not loaded(MODULE) and asks(asked) == 1
    yield asked


def asks(asked: Path) -> int:
    return len(asked.read_text().splitlines())


@pytest.fixture
def api(tmp_path: Path) -> Iterator[LabApiServer]:
    server = LabApiServer(tmp_path).start()
    yield server
    server.stop()


def listed(index: int, scheduler: str = "rr") -> str:
    return LISTED.format(address=service_ip(index), scheduler=scheduler)


def has_three_real_servers(index: int) -> bool:
    prefix = f"-a -t {service_ip(index)}:80 "
    return sum(line.startswith(prefix) for line in ipvs_table()) == 3


def test_a_scheduler_the_kernel_cannot_load_costs_only_its_service(
    unloadable: Path, api: LabApiServer, tmp_path: Path
) -> None:
    objects = cluster(50)
    objects[objects.index(service(REFUSED_INDEX))] = annotated(REFUSED_INDEX, SCHEDULER)
    api.apply(*objects)
    daemon = Daemon(
        api.kubeconfig,
        tmp_path / "daemon.log",
        "--ipvs-sync-period",
        "1h",
        "--ipvs-min-sync-period",
        "0s",
    )
    with cleaned_up(daemon):
        with daemon.refusals_expected():
            daemon.start()
            wait_until(
                lambda: daemon.metrics().value(IN_QUARANTINE, **UNAVAILABLE) == 1,
                APPLY_TIMEOUT,
                "the sed virtual server in quarantine",
            )
        table = ipvs_table()
        assert all(listed(index) in table for index in range(50) if index != REFUSED_INDEX)
        assert not any(service_ip(REFUSED_INDEX) + ":" in line for line in table)
        assert daemon.metrics().value(QUARANTINED, **UNAVAILABLE) == 1
        wait_until(api.fake.recorded_events, APPLY_TIMEOUT, "an Event")
        (refused,) = api.fake.recorded_events()
        assert (refused["reason"], refused["involvedObject"]["name"]) == (
            "KernelRefused",
            f"svc-{REFUSED_INDEX}",
        )

        # The daemon tried the scheduler (the kernel asked its loader for the module again,
        # after the test's own check), and tries it again when its retry comes (4-5 s on).
        tried = asks(unloadable)
        assert tried >= 2
        wait_until(lambda: asks(unloadable) > tried, APPLY_TIMEOUT, "a retry")
        full = daemon.metrics().value(SYNCS, mode="full")
        for index in (1, 2, 3, 4, 5, 6):
            api.apply(endpoint_slice(index, endpoints=3))
            wait_until(
                partial(has_three_real_servers, index),
                APPLY_TIMEOUT,
                f"svc-{index}'s third endpoint in the kernel",
            )
        metrics = daemon.metrics()
        assert metrics.value(SYNCS, mode="full") == full
        assert metrics.value(SYNCS, mode="incremental") >= 6
        assert metrics.value(QUARANTINED, **UNAVAILABLE) == 1
        assert len(api.fake.recorded_events()) == 1
        assert not loaded(MODULE)

        # Its owner picks another scheduler: written at once, and the Service is told.
        api.apply(annotated(REFUSED_INDEX, "rr"))
        wait_until(
            lambda: listed(REFUSED_INDEX) in ipvs_table(),
            APPLY_TIMEOUT,
            "svc-7's virtual server in the kernel",
        )
        wait_until(
            lambda: daemon.metrics().value(IN_QUARANTINE, **UNAVAILABLE) == 0,
            APPLY_TIMEOUT,
            "the quarantine empty",
        )
        wait_until(lambda: len(api.fake.recorded_events()) == 2, APPLY_TIMEOUT, "a second Event")
        assert api.fake.recorded_events()[1]["reason"] == "KernelAccepted"
        assert daemon.metrics().value(SYNCS, mode="full") == full
