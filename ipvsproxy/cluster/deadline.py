"""An overall deadline for a one-shot read of the API, however slowly the server answers.

Read timeouts bound each socket read, not a request: a server that trickles one byte every
few seconds never trips them. ``sync --once`` must end, so the whole read is bounded by a
timer signal. Signals reach only the main thread; elsewhere (the daemon's loop) the caller
bounds its own work and this is a no-op.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from ipvsproxy.cluster.connection import ApiError


class DeadlineExceeded(ApiError):
    """The read did not finish in time; the message is one line."""


@contextmanager
def deadline(seconds: float, action: str) -> Iterator[None]:
    """Raise DeadlineExceeded inside the block once ``seconds`` have passed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        raise DeadlineExceeded(f"{action}: not done within {seconds:g} s (--api-timeout)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
