"""A named scenario: one feature's objects over time, phase by phase (add, modify, scale,
delete), in a namespace of its own. The phases of all scenarios run in lockstep, so that one
sync of each proxy covers one phase of every scenario; ``Writer`` turns each phase's wanted
objects into the writes and deletes that get the cluster there from where it is."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tests.differential.cluster import Cluster, JsonObject, Ref, ref
from tests.differential.traffic import Probe

DEFAULT_PROFILE = "default"
PHASES = ("add", "modify", "scale", "delete")


@dataclass(frozen=True)
class Phase:
    name: str
    # Every object the scenario wants in this phase (none: all deleted).
    objects: tuple[JsonObject, ...] = ()


@dataclass(frozen=True)
class Scenario:
    name: str
    # What of README's feature list it covers, in a few words.
    covers: str
    phases: tuple[Phase, ...]
    # The profiles (proxy configurations) it runs under.
    profiles: tuple[str, ...] = (DEFAULT_PROFILE,)
    # Traffic verdicts to compare after the phases each names.
    traffic: tuple[Probe, ...] = field(default=())

    @property
    def namespace(self) -> str:
        return f"s-{self.name}"

    def phase(self, name: str) -> Phase | None:
        return next((p for p in self.phases if p.name == name), None)


def lifecycle(
    name: str,
    covers: str,
    build: Callable[[str, str], list[JsonObject]],
    *,
    profiles: tuple[str, ...] = (DEFAULT_PROFILE,),
    traffic: tuple[Probe, ...] = (),
) -> Scenario:
    """A scenario from ``build(namespace, phase)``, which returns the objects each of the
    phases "add", "modify" and "scale" wants; in "delete" it wants none."""
    namespace = f"s-{name}"
    phases = tuple(Phase(phase, tuple(build(namespace, phase))) for phase in PHASES[:-1])
    return Scenario(name, covers, (*phases, Phase("delete")), profiles, traffic)


class Writer:
    """What is in the cluster of each scenario's, so a phase writes only what changed.

    Each scope (a namespace) is written by one thread at a time; scopes are independent."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._written: dict[str, dict[Ref, JsonObject]] = {}

    def plan(self, wanted: Iterable[JsonObject], scope: str) -> tuple[list[JsonObject], list[Ref]]:
        """The objects to write and the ones to delete (slices first) so that ``scope``
        holds ``wanted``."""
        written = self._written.get(scope, {})
        wanted_by_ref = {ref(obj): obj for obj in wanted}
        writes = [obj for key, obj in wanted_by_ref.items() if written.get(key) != obj]
        gone = [key for key in written if key not in wanted_by_ref]
        # Slices before their Service, so nothing lingers on an endpoint of a deleted service.
        gone.sort(key=lambda r: (r.kind != "EndpointSlice", r.name))
        return writes, gone

    def write(self, wanted: Iterable[JsonObject], scope: str) -> None:
        writes, gone = self.plan(wanted, scope)
        written = self._written.setdefault(scope, {})
        for obj in writes:
            self.cluster.apply(obj)
            written[ref(obj)] = obj
        for key in gone:
            self.cluster.delete(key)
            del written[key]
