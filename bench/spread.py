"""A figure from several runs as the reports give it: the median, ``_min``, ``_max``, the count
(``_runs``) and the samples themselves."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def median_spread(name: str, values: Sequence[float]) -> dict[str, Any]:
    return {
        name: statistics.median(values),
        f"{name}_min": min(values),
        f"{name}_max": max(values),
        f"{name}_runs": len(values),
        f"{name}_samples": list(values),
    }
