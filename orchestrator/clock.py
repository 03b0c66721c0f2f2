"""Timestamps: one format for every file we write (no imports, so anything may use it)."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> str:
    """UTC ISO-8601 with milliseconds, the format of every timestamp we write."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
