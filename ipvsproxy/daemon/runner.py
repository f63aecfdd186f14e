"""A bounded-frequency runner, as kube-proxy's: syncs on request, but never too often or too rarely.

* ``request()`` asks for a run; requests that arrive while one is pending coalesce into it;
* two runs start at least ``min_interval`` apart (a burst of changes is one sync);
* a run happens at least every ``max_interval`` even with no request (the periodic resync);
* one run at a time, on the thread that called ``loop``;
* a run that raises ends ``loop`` with its exception, and is due again when ``loop`` is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class BoundedFrequencyRunner:
    def __init__(
        self,
        work: Callable[[], None],
        min_interval: float,
        max_interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._work = work
        self._min_interval = min_interval
        self._max_interval = max_interval
        self._clock = clock
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

    def _delay(self, now: float) -> float:
        """Seconds until the next run is due; 0 when it is due now."""
        if self._last_run is None:
            return 0.0 if self._pending else float("inf")
        since = now - self._last_run
        if self._pending:
            return max(0.0, self._min_interval - since)
        return max(0.0, self._max_interval - since)

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
            try:
                self._work()
            except BaseException:
                # The run did not happen: whoever runs the loop again (its supervisor) runs it.
                self.request()
                raise
