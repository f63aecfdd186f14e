"""The api tier's fake API server, serving on loopback inside the lab for a proxy process.

It runs as a thread of the test process; tests change the cluster through ``apply`` and
``delete`` and take it away with ``outage``. The kubeconfig points any client at it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.api.fake_apiserver import KINDS, FakeApiServer

JsonObject = dict[str, Any]


class LabApiServer:
    def __init__(self, directory: Path) -> None:
        self.fake = FakeApiServer()
        self.kubeconfig = directory / "kubeconfig"

    def start(self) -> LabApiServer:
        self.fake.start()
        self.fake.write_kubeconfig(self.kubeconfig)
        return self

    def stop(self) -> None:
        self.fake.stop()

    def apply(self, *objects: JsonObject) -> None:
        """Create or replace each object, in order (a watch sees them in this order)."""
        for obj in objects:
            self.fake.apply(obj)

    def delete(self, *objects: JsonObject) -> None:
        """Delete each object that exists, identified by kind, namespace and name."""
        for obj in objects:
            metadata = obj["metadata"]
            namespace = (
                metadata.get("namespace", "default") if KINDS[obj["kind"]].namespaced else ""
            )
            with contextlib.suppress(KeyError):
                self.fake.delete(obj["kind"], namespace, metadata["name"])

    @contextmanager
    def outage(self, seconds: float, *, forget_history: bool = False) -> Iterator[None]:
        """Stop listening (cutting every watch) for ``seconds``; changes made meanwhile are
        served when it comes back. ``forget_history`` compacts the watch history on return,
        so clients must relist to see what changed."""
        self.fake.stop()
        back_at = time.monotonic() + seconds
        try:
            yield
        finally:
            if forget_history:
                self.fake.compact()
            time.sleep(max(0.0, back_at - time.monotonic()))
            self.fake.start()
