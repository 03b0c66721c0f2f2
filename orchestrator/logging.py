"""structlog set-up for the daemon: its log file and readable console output.

Every process of a team (the lead and each teammate) appends to the same
``.tasks/.run/daemon.log``; a record is one ``O_APPEND`` write of one line, so
lines never interleave. The file has the console's readable lines by default, or
one JSON object per line (``team.log_format = "json"``). In the foreground the same
records are also printed on stderr. Secrets from the environment are masked in both.
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


class _FileSink:
    """A processor that appends the event as one line to ``path`` (JSON, or the console's
    readable form without colours) and passes it on."""

    def __init__(self, path: Path, fmt: str = "text") -> None:
        self.path = path
        self.secrets = secret_values()
        self.text = (structlog.dev.ConsoleRenderer(colors=False)
                     if fmt == "text" else None)
        path.parent.mkdir(parents=True, exist_ok=True)

    def __call__(self, logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
        if self.text is not None:
            rendered = str(self.text(logger, method, dict(event))).replace("\n", "\n    ")
        else:
            rendered = json.dumps(event, default=str, ensure_ascii=False)
        line = redact(rendered, self.secrets) + "\n"
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


def configure(log_file: Path | None, *, console: bool, level: str = "info",
              fmt: str = "text", **bind: Any) -> None:
    """Send this process's logs to ``log_file`` (``fmt``: readable ``text`` or ``json``
    lines) and, if ``console``, to stderr."""
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
    ]
    if log_file is not None:
        processors.append(_FileSink(log_file, fmt))
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
