"""Every exception the kernel layer raises, and how a kernel call's refusal becomes an OpError.

Nothing here imports pyroute2: the real implementations raise pyroute2's NetlinkError as
OSError (``netlink.refusals_as_os_errors``), so the pure planner can catch kernel errors
without the netlink library.
"""

from __future__ import annotations

import os

from ipvsproxy.model import OpError


class IptablesError(Exception):
    """iptables refused an operation or could not run; the message is one line."""


class IPSetError(OSError):
    """An operation on a whole set failed; ``errno`` is the kernel's."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message)


class EntryError(ValueError):
    """An entry that does not fit its set's type or family."""


class SysctlError(Exception):
    """A kernel parameter could not be read or set; the message is one line."""


class PreconditionError(Exception):
    """The machine cannot run ipvsproxy; the message says what to do, in one line."""


# What a single (unbatched) kernel call raises for a refusal; anything else is a bug.
KERNEL_ERRORS: tuple[type[Exception], ...] = (OSError, IptablesError)


def refusal(error: Exception) -> OpError:
    code = getattr(error, "errno", None) or getattr(error, "code", None) or 0
    # OSError's strerror carries the kernel layer's own wording (ipset errnos have no strerror).
    message = getattr(error, "strerror", None) or (os.strerror(code) if code else str(error))
    return OpError(code, message)
