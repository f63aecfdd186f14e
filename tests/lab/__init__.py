"""The lab: a User-Mode Linux kernel with IPVS, booted once per test session.

``python -m tests.lab [PYTEST ARGS]`` boots it and runs pytest inside; see ``boot.py``.
"""

import os

IN_LAB = os.environ.get("IPVSPROXY_LAB") == "1"
# Set by the runner when the lab cannot run here, so the lab tests skip with this reason.
UNAVAILABLE_REASON = os.environ.get("IPVSPROXY_LAB_UNAVAILABLE", "")
