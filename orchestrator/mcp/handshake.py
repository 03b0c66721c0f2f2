"""The first answer of ``orchestrator mcp``, given before the MCP SDK is imported.

Importing the SDK (its protocol types are large pydantic models) takes about a second,
so a client waiting on ``initialize`` would wait that long for the handshake. Instead
`answer_initialize` reads the first line from stdin itself (byte by byte, so nothing
after it is consumed), answers an ``initialize`` request at once with what the SDK
would answer (same capabilities, instructions and version negotiation), and hands the
line on: the SDK then sees it replayed, so its session is initialized as usual, and
its own answer to it is dropped (`orchestrator.mcp.server`). Anything else on the first
line is only handed on. This module imports nothing heavy, and `early` runs it from
`orchestrator.cli.main` before even the CLI is imported (a repository that turns out
not to open then ends the connection after the handshake, with its one line on stderr).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

SERVER_NAME = "orchestrator"
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""The protocol revisions the SDK negotiates through ``initialize`` (a test checks this
against ``mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS``)."""
MAX_LINE = 1 << 20
CAPABILITIES = {"prompts": {"listChanged": False},
                "resources": {"listChanged": False, "subscribe": False},
                "tools": {"listChanged": False}}
INSTRUCTIONS = """\
The orchestrator task board of one git repository. Teammate agents claim pending
tasks, each in its own git worktree and branch, and leave finished work in
`review`. Add tasks with add_task (blocked_by makes one wait for others), watch
them with list_tasks / get_task / events, and review finished work with review and
diff, then merge or discard it."""


@dataclass(frozen=True)
class FirstLine:
    """The first line read from stdin, and the id of the request answered already."""

    line: bytes
    answered: str | int | None = None


def read_line(fd: int = 0) -> bytes:
    """One line from ``fd`` without reading past it (empty at end of input)."""
    chunks = bytearray()
    while len(chunks) < MAX_LINE:
        byte = os.read(fd, 1)
        if not byte:
            break
        chunks += byte
        if byte == b"\n":
            break
    return bytes(chunks)


def initialize_result(params: dict[str, Any]) -> dict[str, Any]:
    """What the SDK answers to ``initialize``: the client's protocol revision when it is
    one the SDK negotiates, else the newest."""
    asked = params.get("protocolVersion")
    version = asked if asked in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
    return {"capabilities": CAPABILITIES, "instructions": INSTRUCTIONS,
            "protocolVersion": version, "serverInfo": {"name": SERVER_NAME, "version": ""}}


def answer_initialize(fd_in: int = 0, fd_out: int = 1) -> FirstLine:
    """Read the first line; when it is an ``initialize`` request, answer it now."""
    line = read_line(fd_in)
    try:
        msg = json.loads(line)
    except ValueError:
        return FirstLine(line)
    if not (isinstance(msg, dict) and msg.get("jsonrpc") == "2.0"
            and msg.get("method") == "initialize" and isinstance(msg.get("params"), dict)
            and isinstance(msg.get("id"), str | int) and not isinstance(msg.get("id"), bool)):
        return FirstLine(line)
    answer = {"jsonrpc": "2.0", "id": msg["id"], "result": initialize_result(msg["params"])}
    data = (json.dumps(answer, separators=(",", ":")) + "\n").encode()
    while data:
        data = data[os.write(fd_out, data):]
    return FirstLine(line, msg["id"])


_first: FirstLine | None = None


def early(args: list[str]) -> None:
    """Answer the handshake now when the command is plain ``orchestrator mcp`` (at most a
    repository option) on a pipe; any other option (``--help``, another transport) is
    left to the command."""
    global _first
    if args[:1] == ["mcp"] and _only_repo_options(args[1:]) and not os.isatty(0):
        _first = answer_initialize()


def _only_repo_options(rest: list[str]) -> bool:
    i = 0
    while i < len(rest):
        if rest[i] in ("-C", "--repo") and i + 1 < len(rest):
            i += 2
        elif rest[i].startswith("--repo="):
            i += 1
        else:
            return False
    return True


def first_line() -> FirstLine:
    """The first line, answered already by `early` or now."""
    return _first if _first is not None else answer_initialize()
