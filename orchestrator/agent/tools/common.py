"""What the file and search tools share: path arguments, text decoding, newline style."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from orchestrator.agent.base import ToolContext, ToolResult
from orchestrator.agent.paths import confine
from orchestrator.fsutil import atomic_write

BINARY_SNIFF_BYTES = 8192
NEW_FILE_MODE = 0o644


def prop(kind: str, description: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "description": description, **extra}


def obj(required: list[str], **props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required,
            "additionalProperties": False}


class PathTool:
    """A tool with one path argument (``path_arg``), confined to the worktree; read-only
    tools may also open the run's spill folder."""

    name = ""
    path_arg = "file_path"
    read_only = True
    edits_files = False

    def permission_subject(self, args: dict[str, Any]) -> str | None:
        value = args.get(self.path_arg)
        return value if isinstance(value, str) and value else "."

    def resolve(self, args: dict[str, Any], ctx: ToolContext) -> Path:
        extra = [ctx.spill_dir] if self.read_only and ctx.spill_dir else []
        return confine(ctx.cwd, args.get(self.path_arg) or ".", extra_roots=extra)

    def error(self, message: str) -> ToolResult:
        return ToolResult(f"{self.name}: {message}", is_error=True)


def is_binary(data: bytes) -> bool:
    return b"\0" in data[:BINARY_SNIFF_BYTES]


def decode(data: bytes) -> str:
    """Text that re-encodes to the same bytes, even when the file is not valid UTF-8."""
    return data.decode("utf-8", errors="surrogateescape")


def encode(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogateescape")


def uses_crlf(text: str) -> bool:
    first = text.find("\n")
    return first > 0 and text[first - 1] == "\r"


def to_style(text: str, crlf: bool) -> str:
    """``text`` with its line ends in the file's style."""
    text = text.replace("\r\n", "\n")
    return text.replace("\n", "\r\n") if crlf else text


def write_file(path: Path, text: str) -> None:
    """Atomic write that keeps an existing file's permission bits (new files get 0644)."""
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = NEW_FILE_MODE
    atomic_write(path, encode(text), durable=False)
    os.chmod(path, mode)
