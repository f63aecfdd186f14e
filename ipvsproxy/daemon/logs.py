"""Structured logs on stderr: one line per event, as text or as one JSON object per line.

Fields passed with ``extra={...}`` follow the message: ``key=value`` in text, keys in JSON.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

# klog's convention: -v 4 and up is debug output.
DEBUG_VERBOSITY = 4
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD}


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in _fields(record).items())
        line = f"{_timestamp(record)} {record.levelname.lower()} {record.getMessage()}"
        line = f"{line} {fields}" if fields else line
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
            "logger": record.name,
            **_fields(record),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(logging_format: str, verbosity: int) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if logging_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    # Debug detail is ours: pyroute2's (every netlink message it decodes) would bury it.
    own = logging.getLogger(__name__.split(".", 1)[0])
    own.setLevel(logging.DEBUG if verbosity >= DEBUG_VERBOSITY else logging.NOTSET)


def fatal_line(logging_format: str, message: str, error: BaseException | None = None) -> str:
    """The error that ends the command, as its logs read: one JSON object (with ``error``'s
    traceback) for json, else ``ipvsproxy: message`` as every command's errors."""
    if logging_format != "json":
        return f"ipvsproxy: {message}"
    exc_info = (type(error), error, error.__traceback__) if error is not None else None
    record = logging.makeLogRecord(
        {
            "name": "ipvsproxy",
            "levelno": logging.CRITICAL,
            "levelname": "CRITICAL",
            "msg": message,
            "exc_info": exc_info,
        }
    )
    return JsonFormatter().format(record)
