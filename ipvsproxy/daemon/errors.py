"""The error that stops ``ipvsproxy run`` before it serves, apart from the daemon's imports."""

from __future__ import annotations


class DaemonError(Exception):
    """The daemon cannot start; the message is one line."""
