"""A bounded-frequency runner, as kube-proxy's: syncs on request, but never too often or too rarely.

* ``request()`` asks for a run; requests that arrive while one is pending coalesce into it;
* runs start at most one per ``min_interval`` on average, with a burst of ``burst`` allowed
  (kube-proxy's ``burstSyncs``, 2): a token bucket that starts full, so a change that comes
  soon after a quiet run is not held back for a whole interval, while a stream of changes
  still syncs once per interval;
* a run happens at least every ``max_interval`` even with no request (the periodic resync);
* one run at a time, on the thread that called ``loop``; a long run may take a run that is
  due into itself (``take_due``), as a periodic full sync does with the changes that come
  while it reads the kernel;
* a run that raises ends ``loop`` with its exception, and is due again when ``loop`` is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

# kube-proxy's IPVS proxier: ``burstSyncs = 2``.
BURST_SYNCS = 2


class SyncBudget:
    """A token bucket: ``burst`` runs at once, then one per ``min_interval``."""

    def __init__(self, min_interval: float, burst: int, now: float) -> None:
        self._min_interval = min_interval
        self._burst = float(burst)
        self._tokens = float(burst)
        self._since = now

    def _refilled(self, now: float) -> float:
        if self._min_interval <= 0:
            return self._burst
        gained = (now - self._since) / self._min_interval
        return min(self._burst, self._tokens + gained)

    def wait(self, now: float) -> float:
        """Seconds until a run may start; 0 when it may start now."""
        if self._min_interval <= 0:
            return 0.0
        return max(0.0, (1.0 - self._refilled(now)) * self._min_interval)

    def spend(self, now: float) -> None:
        self._tokens = max(0.0, self._refilled(now) - 1.0)
        self._since = now


class BoundedFrequencyRunner:
    def __init__(
        self,
        work: Callable[[], None],
        min_interval: float,
        max_interval: float,
        clock: Callable[[], float] = time.monotonic,
        burst: int = BURST_SYNCS,
    ) -> None:
        self._work = work
        self._max_interval = max_interval
        self._clock = clock
        self._budget = SyncBudget(min_interval, burst, clock())
        self._wake = threading.Condition()
        self._pending = False
        self._stopped = False
        self._last_run: float | None = None

    def request(self) -> None:
        with self._wake:
            self._pending = True
            self._wake.notify_all()

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify_all()

    def take_due(self) -> bool:
        """From inside a run: whether a requested run is due now. If so it counts as started
        (its request taken, its share of the budget spent) and the caller makes it."""
        with self._wake:
            now = self._clock()
            if self._stopped or not self._pending or self._budget.wait(now) > 0:
                return False
            self._pending = False
            self._last_run = now
            self._budget.spend(now)
            return True

    def _delay(self, now: float) -> float:
        """Seconds until the next run is due; 0 when it is due now."""
        if self._pending:
            return self._budget.wait(now)
        if self._last_run is None:
            return float("inf")
        return max(self._budget.wait(now), self._max_interval - (now - self._last_run))

    def loop(self) -> None:
        """Run ``work`` whenever due, until ``stop``; the first run waits for a request."""
        while True:
            with self._wake:
                while not self._stopped:
                    delay = self._delay(self._clock())
                    if delay <= 0:
                        break
                    self._wake.wait(None if delay == float("inf") else delay)
                if self._stopped:
                    return
                self._pending = False
                self._last_run = self._clock()
                self._budget.spend(self._last_run)
            try:
                self._work()
            except BaseException:
                # The run did not happen: whoever runs the loop again (its supervisor) runs it.
                self.request()
                raise
