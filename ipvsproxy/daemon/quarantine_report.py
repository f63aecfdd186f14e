"""What the daemon tells of objects entering and leaving quarantine (``reconcile.quarantine``).

Once per change of state, never per retry: one log line, ``ipvsproxy_objects_quarantined_total``
when an object goes in, and an Event on the Service it serves (Warning ``KernelRefused``;
Normal ``KernelAccepted`` when the kernel takes it at last). Objects that serve no one Service
(kernel parameters, schedulers, the entries of sets keyed by port alone) are logged only, as
everything is with ``--source``, where there is no API to write Events to.
``ipvsproxy_objects_in_quarantine`` follows what waits, after every sync.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from ipvsproxy.cluster.events import NORMAL, WARNING, ObjectReference
from ipvsproxy.daemon.metrics import Metrics
from ipvsproxy.model import (
    DesiredState,
    ObjectKey,
    RealServerRef,
    Service,
    ServicePortName,
    VirtualServerKey,
)
from ipvsproxy.reconcile.held import Held, IPSetMember, describe_held, kind_of
from ipvsproxy.reconcile.quarantine import Change, Quarantine, Transition
from ipvsproxy.translate.ipsets import virtual_server_of_member

log = logging.getLogger(__name__)

REFUSED = "KernelRefused"
ACCEPTED = "KernelAccepted"


def owner_of(obj: Held, desired: DesiredState) -> ServicePortName | None:
    """The service port a held object serves, where one does."""
    key: VirtualServerKey | None
    match obj:
        case VirtualServerKey():
            key = obj
        case RealServerRef(virtual):
            key = virtual
        case IPSetMember(name, entry):
            key = virtual_server_of_member(name, entry)
        case _:
            key = None
    wanted = desired.virtual_servers.get(key) if key is not None else None
    return wanted.owner if wanted is not None else None


class Events(Protocol):
    """An ``EventRecorder``: queue an Event, never waiting."""

    def event(self, involved: ObjectReference, type_: str, reason: str, message: str) -> None: ...


class QuarantineReport:
    def __init__(self, metrics: Metrics, events: Events | None) -> None:
        self._metrics = metrics
        self._events = events

    def report(
        self,
        transitions: tuple[Transition, ...],
        quarantine: Quarantine,
        desired: DesiredState,
        services: Mapping[ObjectKey, Service],
    ) -> None:
        for transition in transitions:
            owner = owner_of(transition.object, desired)
            self._log(transition, owner)
            if transition.change is Change.QUARANTINED:
                kind = kind_of(transition.object)
                self._metrics.quarantined.labels(kind=kind, reason=transition.entry.reason).inc()
            if owner is not None and (
                transition.change is Change.QUARANTINED or transition.applied
            ):
                self._event(transition, owner, services.get(owner.service))
        self._metrics.in_quarantine.set(quarantine.counts())

    def _log(self, transition: Transition, owner: ServicePortName | None) -> None:
        what = describe_held(transition.object) + (f" of {owner}" if owner is not None else "")
        entry = transition.entry
        if transition.change is Change.QUARANTINED:
            # "kernel refused: ", as every refusal the daemon logs.
            log.warning(
                "kernel refused: %s: %s (%s); quarantined, retried with backoff",
                what,
                entry.error.message,
                entry.reason,
            )
        elif transition.applied:
            log.info("released from quarantine: %s, taken after %d tries", what, entry.attempts)
        else:
            log.info("released from quarantine: %s, no longer wanted", what)

    def _event(
        self, transition: Transition, owner: ServicePortName, service: Service | None
    ) -> None:
        if self._events is None:
            return
        key = owner.service
        involved = ObjectReference(
            "Service", key.namespace, key.name, service.uid if service else ""
        )
        what = describe_held(transition.object)
        port = f"port {owner.port_name}" if owner.port_name else "its port"
        entry = transition.entry
        if transition.change is Change.QUARANTINED:
            message = (
                f"the kernel refused {what} for {port}: {entry.error.message} ({entry.reason}); "
                "it is retried with backoff, and nothing else waits for it"
            )
            self._events.event(involved, WARNING, REFUSED, message)
        else:
            message = f"the kernel took {what} for {port} after {entry.attempts} tries"
            self._events.event(involved, NORMAL, ACCEPTED, message)
