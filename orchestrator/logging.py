"""structlog set-up for the daemon: JSON lines to its log file, readable console output.

Every process of a team (the lead and each teammate) appends to the same
``.tasks/.run/daemon.log``; a record is one ``O_APPEND`` write of one line, so
lines never interleave. In the foreground the same records are also printed
readably on stderr. Secrets from the environment are masked in both.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import structlog

from orchestrator.events import redact, secret_values
from orchestrator.fsutil import append_line


class _JsonFileSink:
    """A processor that appends the event as one JSON line to ``path`` and passes it on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.secrets = secret_values()
        path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
        line = redact(json.dumps(event, default=str, ensure_ascii=False), self.secrets) + "\n"
        try:
            append_line(self.path, line.encode())
        except OSError:  # a full or read-only disk must not turn logging into a crash
            with contextlib.suppress(OSError):
                os.write(2, line.encode())
        return event


def _redact_values(logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
    secrets = secret_values()
    return {k: redact(v, secrets) if isinstance(v, str) else v for k, v in event.items()}


def _drop(logger: Any, method: str, event: dict[str, Any]) -> str:
    raise structlog.DropEvent


def configure(log_file: Path | None, *, console: bool, level: str = "info", **bind: Any) -> None:
    """Send this process's logs to ``log_file`` (JSON lines) and, if ``console``, to stderr."""
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
    ]
    if log_file is not None:
        processors.append(_JsonFileSink(log_file))
    if console:
        processors += [_redact_values, structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())]
    else:
        processors.append(_drop)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    structlog.contextvars.clear_contextvars()
    if bind:
        structlog.contextvars.bind_contextvars(**bind)


def get_logger(**bind: Any) -> Any:
    return structlog.get_logger().bind(**bind)
