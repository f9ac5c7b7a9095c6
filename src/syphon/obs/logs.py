"""Logging of the entry points: text or JSON lines, the run id in every record, secrets
masked.

syphon never logs a connection string, a key or a body on purpose; the mask is the
second line of defence for what a library might print (an SDK error that quotes an
endpoint string, say): ``SharedAccessKey=…`` and ``SharedAccessSignature …`` values are
replaced by ``***`` before a record is written.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any, TextIO

LOG_FORMATS = ("text", "json")

#: The run the process is working on; read by every record, whatever its thread.
_run_id: str | None = None

_SECRET = re.compile(
    r"(SharedAccessKey\s*=\s*)[^;\s\"']+|(SharedAccessSignature\s+)[^;\"']+|(sig=)[^&;\s\"']+",
    re.IGNORECASE,
)

_HANDLER_NAME = "syphon"


def mask_secrets(text: str) -> str:
    """``text`` with every SAS key or signature value replaced by ``***``."""
    return _SECRET.sub(lambda m: (m.group(1) or m.group(2) or m.group(3)) + "***", text)


@contextlib.contextmanager
def run_context(run_id: str) -> Iterator[None]:
    """Every record logged inside carries ``run_id``."""
    global _run_id
    previous, _run_id = _run_id, run_id
    try:
        yield
    finally:
        _run_id = previous


class _RecordFilter(logging.Filter):
    """Names the run in every record, and holds a library's record to the libraries'
    level when the library logged it on the root logger (py4j logs the connection it
    retries there, at INFO, with a traceback)."""

    def __init__(self, library_level: int) -> None:
        super().__init__()
        self.library_level = library_level

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            record.name == "root"
            and record.levelno < self.library_level
            and _from_library(record.pathname)
        ):
            return False
        record.run_id = _run_id or "-"
        return True


def _from_library(pathname: str) -> bool:
    return any(f"{os.sep}{name}{os.sep}" in pathname for name in LIBRARY_LOGGERS)


class _TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s run=%(run_id)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return mask_secrets(super().format(record))


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "run_id": _run_id,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):  # a record's own figures (a wave's progress)
            entry.update({k: v for k, v in fields.items() if k not in entry})
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return mask_secrets(json.dumps(entry, default=str))


#: The libraries' loggers: their INFO lines narrate every AMQP link state, HTTP request
#: and py4j call, which buries what syphon says.
LIBRARY_LOGGERS = (
    "azure",
    "uamqp",
    "py4j",
    "proton",
    "urllib3",
    "msal",
)


def configure_logging(
    level: str = "INFO",
    fmt: str = "text",
    stream: TextIO | None = None,
    sdk_level: str = "WARNING",
) -> None:
    """Installs (or replaces) syphon's handler on the root logger.

    Args:
        level: DEBUG, INFO, WARNING or ERROR.
        fmt: ``text`` (one readable line) or ``json`` (one JSON object per line with
            ``time``, ``level``, ``logger``, ``run_id``, ``message``, ``error``, and a
            record's own figures: ``logger.info(..., extra={"fields": {...}})``).
        stream: where records go (standard error by default).
        sdk_level: the level of :data:`LIBRARY_LOGGERS` (never below ``level``); at
            ``DEBUG`` they log at DEBUG too.
    """
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)} (got {fmt!r})")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.setLevel(level.upper())
    libraries = (
        logging.DEBUG
        if root.level <= logging.DEBUG
        else max(logging.getLevelName(sdk_level.upper()), root.level)
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.addFilter(_RecordFilter(libraries))
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    root.addHandler(handler)
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(libraries)
