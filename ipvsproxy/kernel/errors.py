"""The exceptions a kernel call raises when the kernel refuses it, as an OpError."""

from __future__ import annotations

import os

from pyroute2.netlink.exceptions import NetlinkError

from ipvsproxy.kernel.iptables.text import IptablesError
from ipvsproxy.model import OpError

# What a single (unbatched) kernel call raises for a refusal; anything else is a bug.
KERNEL_ERRORS: tuple[type[Exception], ...] = (OSError, NetlinkError, IptablesError)


def refusal(error: Exception) -> OpError:
    code = getattr(error, "errno", None) or getattr(error, "code", None) or 0
    # OSError's strerror carries the kernel layer's own wording (ipset errnos have no strerror).
    message = getattr(error, "strerror", None) or (os.strerror(code) if code else str(error))
    return OpError(code, message)
