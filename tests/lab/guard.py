"""What a lab test does when it runs outside the lab: skip, or fail under CI."""

from __future__ import annotations

import os

import pytest

from tests.lab import IN_LAB, UNAVAILABLE_REASON


def require_lab(tier: str) -> None:
    if IN_LAB:
        return
    reason = UNAVAILABLE_REASON or f"lab tests run inside the lab: python -m tests.lab {tier}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the lab did not run: {reason}")
    pytest.skip(reason)
