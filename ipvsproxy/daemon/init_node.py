"""``ipvsproxy run --init-only``: kube-proxy's flag, for the chart's privileged init container."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ipvsproxy.config import ProxyConfig, reconciler_settings
from ipvsproxy.daemon.errors import DaemonError
from ipvsproxy.daemon.logs import configure
from ipvsproxy.kernel.bundle import real_kernel
from ipvsproxy.kernel.errors import PreconditionError
from ipvsproxy.kernel.preconditions import require_net_admin
from ipvsproxy.reconcile.describe import describe
from ipvsproxy.reconcile.initialize import initialize

log = logging.getLogger(__name__)


def init_node(config: ProxyConfig, verbosity: int, warnings: Sequence[str] = ()) -> int:
    """Set what differs of the kernel parameters; 0 when all were set, 1 when one was refused."""
    configure(config.logging_format, verbosity)
    for warning in warnings:
        log.warning(warning)
    try:
        require_net_admin()
        with real_kernel() as kernel:
            outcome = initialize(kernel, reconciler_settings(config))
    except PreconditionError as error:
        raise DaemonError(str(error)) from None
    for op in outcome.applied:
        log.info(describe(op))
    for failure in outcome.failures:
        log.error("kernel refused: %s", failure)
    log.info(
        "kernel parameters set; exiting, as --init-only asks",
        extra={"written": len(outcome.applied), "refused": len(outcome.failures)},
    )
    return 1 if outcome.failures else 0
