from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _heap_unfrozen() -> Iterator[None]:
    """A daemon freezes the collector's survivors after each full sync; in the test process
    that would keep every garbage cycle made before it from ever being collected."""
    yield
    gc.unfreeze()
