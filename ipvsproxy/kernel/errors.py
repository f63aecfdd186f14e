"""Every exception the kernel layer raises, and how a kernel call's refusal becomes an OpError.

Nothing here imports pyroute2: the real implementations raise pyroute2's NetlinkError as
OSError (``netlink.refusals_as_os_errors``), so the pure planner can catch kernel errors
without the netlink library.
"""

from __future__ import annotations

import enum
import errno
import os

from ipvsproxy.model import AddVirtualServer, OpError, PlanOp, SetSysctl, UpdateVirtualServer


class IptablesError(Exception):
    """iptables refused an operation or could not run; the message is one line."""


class IPSetError(OSError):
    """An operation on a whole set failed; ``errno`` is the kernel's."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message)


class EntryError(ValueError):
    """An entry that does not fit its set's type or family."""


class PreconditionError(Exception):
    """The machine cannot run ipvsproxy; the message says what to do, in one line."""


class IPVSUnavailable(PreconditionError):
    """The kernel has no IPVS and cannot load it."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"the kernel offers no IPVS ({reason}); load the ip_vs module (modprobe ip_vs) "
            "or run a kernel built with CONFIG_IP_VS"
        )


# What a single (unbatched) kernel call raises for a refusal; anything else is a bug.
KERNEL_ERRORS: tuple[type[Exception], ...] = (OSError, IptablesError)


def refused(code: int) -> OpError:
    """The kernel's answer to one op it refused with errno ``code``."""
    return OpError(code, os.strerror(code))


def refusal(error: Exception) -> OpError:
    code = getattr(error, "errno", None) or getattr(error, "code", None) or 0
    # OSError's strerror carries the kernel layer's own wording (ipset errnos have no strerror).
    message = getattr(error, "strerror", None) or (os.strerror(code) if code else str(error))
    return OpError(code, message)


class ErrorClass(enum.Enum):
    """What an op's failure says about the kernel, and so what the next sync does."""

    # Worth trying again as it was (memory, buffers, a lock, an interrupted call, a command
    # that did not finish): the next sync is a full one.
    TRANSIENT = "transient"
    # The kernel does not hold what the last sync left, as far as this process knew (the
    # object already exists, or is missing): the next sync reads it whole and repairs.
    OUT_OF_STEP = "out_of_step"
    # The kernel will not take this object as asked (a scheduler module it cannot load, a
    # value it does not accept, a parameter it does not have or lets nobody write): asking
    # again soon will not help, and nothing else is in doubt.
    REFUSED = "refused"


TRANSIENT_ERRNOS = frozenset(
    {
        errno.EAGAIN,
        errno.EINTR,
        errno.EBUSY,
        errno.ENOBUFS,
        errno.ENOMEM,
        errno.ETIMEDOUT,
        errno.EMFILE,
        errno.ENFILE,
    }
)
# include/uapi/linux/netfilter/ipset/ip_set.h: "the element is already added or is missing",
# ipset's own EEXIST and ENOENT for entries.
IPSET_ERR_EXIST = 4103
# A virtual server's ENOENT: the kernel has no module for its scheduler (or persistence
# engine) and could not load one; any other op's ENOENT names something that is missing.
SCHEDULER_UNAVAILABLE = "scheduler_unavailable"


def _writes_virtual_server(op: PlanOp) -> bool:
    return isinstance(op, AddVirtualServer | UpdateVirtualServer)


def error_class(op: PlanOp, error: OpError) -> ErrorClass:
    """How the kernel's answer to ``op`` is to be taken. Errors without an errno (an
    iptables-restore that failed) are transient: nothing tells them apart."""
    code = error.errno
    if not code or code in TRANSIENT_ERRNOS:
        return ErrorClass.TRANSIENT
    if code in (errno.EEXIST, errno.ESRCH, IPSET_ERR_EXIST):
        return ErrorClass.OUT_OF_STEP
    if code == errno.ENOENT and not (_writes_virtual_server(op) or isinstance(op, SetSysctl)):
        return ErrorClass.OUT_OF_STEP
    return ErrorClass.REFUSED


def refusal_reason(op: PlanOp, error: OpError) -> str:
    """A short, bounded name for why the kernel refused ``op`` (a metric label)."""
    if error.errno == errno.ENOENT and _writes_virtual_server(op):
        return SCHEDULER_UNAVAILABLE
    return errno.errorcode.get(error.errno, f"errno_{error.errno}")
