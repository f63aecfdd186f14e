"""The per-service-port traffic counters of /metrics, written as text from their totals.

prometheus_client holds a sample object (its labels in a dict) for each of the five counts
of every service port, then a string per line: at 10,000 services 26 MB at the peak and 1.9 s
of CPU on the host for a scrape, and, in the daemon, 10-14 MB kept after each of its handler
threads had answered one. Here the totals are written as text straight into the answer's
buffer, as prometheus_client writes it (a test holds the two to the same bytes), and the
kernel's virtual servers are taken one at a time as they are decoded.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import BinaryIO, NamedTuple

from prometheus_client.utils import floatToGoString

from ipvsproxy.model import DesiredState, VirtualServerState

# How prometheus_client writes a value (as Go does); untyped there.
_number: Callable[[float], str] = floatToGoString

# The kernel's virtual servers with their counters (their real servers are not needed), and
# the desired state that names their owners.
TrafficSource = Callable[[], tuple[Iterable[VirtualServerState], DesiredState | None]]


class Family(NamedTuple):
    name: str
    help_text: str
    # The first count's place in a row's totals, and whether an in and an out follow.
    first: int
    directions: bool


FAMILIES = (
    Family(
        "ipvsproxy_service_connections",
        "Connections IPVS scheduled to the service port's virtual servers",
        0,
        False,
    ),
    Family(
        "ipvsproxy_service_packets", "Packets through the service port's virtual servers", 1, True
    ),
    Family("ipvsproxy_service_bytes", "Bytes through the service port's virtual servers", 3, True),
)

Row = tuple[tuple[str, str, str, str], list[int]]


def totals(states: Iterable[VirtualServerState], desired: DesiredState | None) -> list[Row]:
    """Per (namespace, service, port name, protocol), the sums of its virtual servers'
    connections, packets in and out, bytes in and out; sorted. Virtual servers no Service
    owns are left out."""
    found: dict[tuple[str, str, str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    if desired is None:
        return []
    for state in states:
        wanted = desired.virtual_servers.get(state.server.key)
        if wanted is None:
            continue
        owner = wanted.owner
        total = found[
            (owner.service.namespace, owner.service.name, owner.port_name, owner.protocol.value)
        ]
        stats = state.stats
        total[0] += stats.connections
        total[1] += stats.packets_in
        total[2] += stats.packets_out
        total[3] += stats.bytes_in
        total[4] += stats.bytes_out
    return sorted(found.items())


def _escaped(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _write(out: BinaryIO, family: Family, rows: list[Row]) -> None:
    counter, first = f"{family.name}_total", family.first
    out.write(f"# HELP {counter} {family.help_text}\n# TYPE {counter} counter\n".encode())
    for (namespace, service, port, protocol), counts in rows:
        # Label names in order, as prometheus_client sorts them.
        common = (
            f'namespace="{_escaped(namespace)}",port="{_escaped(port)}",'
            f'protocol="{_escaped(protocol)}",service="{_escaped(service)}"'
        )
        # Each row's text written at once: a scrape holds the buffer, not 50,000 strings.
        if family.directions:
            out.write(
                f'{counter}{{direction="in",{common}}} {_number(counts[first])}\n'
                f'{counter}{{direction="out",{common}}} {_number(counts[first + 1])}\n'.encode()
            )
        else:
            out.write(f"{counter}{{{common}}} {_number(counts[first])}\n".encode())


def write_text(out: BinaryIO, rows: list[Row]) -> None:
    """The three families of ``rows``, in the text format; a family with no rows still has
    its HELP and TYPE lines, as prometheus_client writes an empty one."""
    for family in FAMILIES:
        _write(out, family, rows)
