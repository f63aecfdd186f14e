"""A long sync's progress in the log: at 10,000 services the first one writes 121,000 IPVS
objects for tens of seconds, and an operator watching the pod's log should see it move."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

# Nothing is logged for a sync shorter than this, and then at most once per this.
QUIET_FOR = 5.0


class ProgressLog:
    """One sync's ``Progress`` (``reconcile.apply``): an info line now and then."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, quiet_for: float = QUIET_FOR
    ) -> None:
        self._clock = clock
        self._quiet_for = quiet_for
        self._last = clock()

    def __call__(self, done: int, total: int) -> None:
        now = self._clock()
        if now - self._last < self._quiet_for:
            return
        self._last = now
        log.info(
            "programming IPVS: %d of %d writes done",
            done,
            total,
            extra={"written": done, "total": total},
        )
