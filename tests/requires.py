"""What a test needs of this machine: without it, the test skips, or fails under ``CI=true``."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def missing(message: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)
