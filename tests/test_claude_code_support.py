"""Driving the real Claude Code CLI from tests (helpers, no tests).

`claude_binary` finds the copy ``scripts/test-deps`` installs (installing it when
npm is there); `ClaudeScript` scripts Claude Code's conversation on the loopback
Messages API. Claude Code sends its own system prompt and tools, and may make
side requests (titles, quota checks) that carry no tools: those get a plain
text. A request carrying tools is the main conversation, and its step is the
number of assistant turns already in it, so a resumed session (``--resume``)
continues the script where the last run stopped.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.loopback import LoopbackAPI, Reply, text, tool_use

ROOT = Path(__file__).resolve().parents[1]
CLAUDE = ROOT / ".venv" / "npm" / "node_modules" / ".bin" / "claude"
WORKTREE_RE = re.compile(r"(/[^\"\s\\]*?/\.worktrees/task_\d+)")

Step = list[dict[str, Any]] | str
Script = Callable[[Path], list[Step]]
"""The steps of one task's conversation, given its worktree (tools want absolute paths)."""


def claude_binary() -> Path:
    """The Claude Code CLI from npm; skips only when npm itself is missing."""
    if not CLAUDE.exists():
        if shutil.which("npm") is None:
            pytest.skip("npm is missing: cannot install @anthropic-ai/claude-code")
        subprocess.run([str(ROOT / "scripts" / "test-deps")], check=True, timeout=600)
    assert CLAUDE.exists(), f"scripts/test-deps did not install {CLAUDE}"
    return CLAUDE


def claude_env(api: LoopbackAPI, **extra: str) -> dict[str, str]:
    """What a user running Claude Code against a gateway sets, plus ``extra``."""
    env = {"ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": "sk-ant-test-dummy",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "ORCH_CLAUDE_CODE_BINARY": str(CLAUDE)}
    env.update(extra)
    return env


class ClaudeScript:
    """Answers Claude Code's requests on ``api`` from ``script``; see the module docstring."""

    def __init__(self, api: LoopbackAPI, script: Script) -> None:
        self.api = api
        self.script = script
        self.problems: list[str] = []
        api.responder = self.respond

    def respond(self, body: dict[str, Any]) -> Reply:
        if not body.get("tools"):
            return Reply([text("ok")])
        found = WORKTREE_RE.search(json.dumps(body))
        if found is None:
            self.problems.append("a request with tools names no task worktree")
            return Reply([text("no worktree")])
        steps = self.script(Path(found.group(1)))
        n = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        if n >= len(steps):
            self.problems.append(f"unexpected step {n} (script has {len(steps)})")
            return Reply([text("the script is over")])
        step = steps[n]
        if isinstance(step, str):
            return Reply([text(step)])
        return Reply(step, "tool_use")

    def conversations(self) -> list[dict[str, Any]]:
        """The requests that carried tools (the main conversation), in order."""
        return [r for r in self.api.requests if r.get("tools")]


def write(path: Path, content: str) -> list[dict[str, Any]]:
    return [tool_use("Write", {"file_path": str(path), "content": content})]


def read(path: Path) -> list[dict[str, Any]]:
    return [tool_use("Read", {"file_path": str(path)})]


def edit(path: Path, old: str, new: str) -> list[dict[str, Any]]:
    return [tool_use("Edit", {"file_path": str(path), "old_string": old, "new_string": new})]


def bash(command: str) -> list[dict[str, Any]]:
    return [tool_use("Bash", {"command": command, "description": "run a command"})]


def said(requests: list[dict[str, Any]], needle: str) -> bool:
    """Whether some user message of some request contains ``needle``."""
    return any(needle in json.dumps(m.get("content")) for r in requests
               for m in r.get("messages", []) if m.get("role") == "user")
