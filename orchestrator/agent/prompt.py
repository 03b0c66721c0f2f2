"""Prompt assembly for one task in one worktree, laid out for the prompt cache.

The system prompt has a fixed order:

    1. base instructions                     ┐ the same for every task of a project:
    2. user memory    ~/.claude/CLAUDE.md    │ breakpoint here, so every task and
    3. project memory CLAUDE.md, AGENTS.md   ┘ teammate reads it from the cache
    4. the task: subject, description, feedback from earlier attempts
    5. the tools (their definitions travel in the request's ``tools`` field,
       which the API puts first in the cache prefix; breakpoint on the last one)
    6. working directory and ``git status``
    7. MCP capabilities (servers' instructions; filled by the MCP client)

Messages get a breakpoint on their last block, and one on the user message
before, so each turn reads the previous turn's prefix from the cache. That is
four breakpoints, the API's limit. The prompt is rebuilt for every task.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.beneath import read_beneath
from orchestrator.errors import GitError, UserError
from orchestrator.git import Git
from orchestrator.model import Task
from orchestrator.prompting import last_failure

EPHEMERAL = {"type": "ephemeral"}
MEMORY_MAX_CHARS = 16_000
STATUS_MAX_LINES = 40
PROJECT_MEMORY_FILES = ("CLAUDE.md", ".claude/CLAUDE.md", "AGENTS.md")

BASE_INSTRUCTIONS = """\
You are a teammate in a team of coding agents. You work alone on one task, in \
your own git worktree on the task's branch; other teammates work on other \
tasks in other worktrees.
- Do the task completely, then end your turn with a short summary of what you \
changed and how you checked it.
- Use the tools: read before you edit, keep edits small and exact, run the \
project's tests or checks with bash when there are any.
- Stay inside the worktree. Do not commit, push or switch branches: what you \
leave in the worktree is committed for review when you finish.
- If something needs a person or another task, say so in your summary, or \
use task_create / send_message when you have them."""


@dataclass
class Prompt:
    """What the loop sends on every turn, besides the messages."""

    system: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    first_message: str


@dataclass
class PromptSources:
    """Where the parts come from; tests point ``home`` at a temp folder."""

    worktree: Path
    home: Path = field(default_factory=Path.home)
    mcp_capabilities: str = ""


def build_prompt(task: Task, tools: list[dict[str, Any]], sources: PromptSources) -> Prompt:
    stable = "\n\n".join(p for p in (
        BASE_INSTRUCTIONS,
        _memory("User memory (~/.claude/CLAUDE.md)", sources.home, [".claude/CLAUDE.md"]),
        project_memory(sources.worktree),
    ) if p)
    per_task = [task_text(task), environment(sources.worktree)]
    if sources.mcp_capabilities:
        per_task.append("# MCP servers\n" + sources.mcp_capabilities)
    system: list[dict[str, Any]] = [{"type": "text", "text": stable, "cache_control": EPHEMERAL},
              {"type": "text", "text": "\n\n".join(per_task)}]
    return Prompt(system=system, tools=with_tools_breakpoint(tools),
                  first_message=f"Begin work on {task.id}: {task.subject}")


def task_text(task: Task) -> str:
    parts = [f"# Your task: {task.id}\n{task.subject}"]
    if task.description.strip():
        parts.append(task.description.strip())
    failure = last_failure(task)
    if failure:
        parts.append(failure)
    if task.feedback:
        notes = "\n".join(f"- {f}" for f in task.feedback)
        parts.append("Feedback from earlier attempts (the worktree keeps their work):\n" + notes)
    return "\n\n".join(parts)


def environment(worktree: Path) -> str:
    status = _git(worktree, "status", "--short", "--branch")
    lines = status.splitlines()
    if len(lines) > STATUS_MAX_LINES:
        lines = [*lines[:STATUS_MAX_LINES], f"… {len(lines) - STATUS_MAX_LINES} more"]
    return f"# Environment\nWorking directory: {worktree}\ngit status:\n" + "\n".join(lines)


def with_tools_breakpoint(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not tools:
        return []
    return [*tools[:-1], {**tools[-1], "cache_control": EPHEMERAL}]


def with_message_breakpoints(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of ``messages`` with breakpoints on the last message and the user message
    before it (the stored conversation is never changed)."""
    out = list(messages)
    marked = 0
    for i in range(len(out) - 1, -1, -1):
        if marked == 2:
            break
        if i == len(out) - 1 or out[i]["role"] == "user":
            out[i] = _mark_last_block(out[i])
            marked += 1
    return out


def _mark_last_block(message: dict[str, Any]) -> dict[str, Any]:
    content = message["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    if not blocks:
        return message
    blocks[-1] = {**blocks[-1], "cache_control": EPHEMERAL}
    return {**message, "content": blocks}


def project_memory(worktree: Path) -> str:
    """The project's memory files (`PROJECT_MEMORY_FILES`) as the worktree has them."""
    return _memory("Project memory", worktree, list(PROJECT_MEMORY_FILES))


def _memory(title: str, root: Path, names: list[str]) -> str:
    """The files ``names`` under ``root``, read without following a link (a CLAUDE.md
    the agent made a link to a file of the host is not read) and bounded."""
    found = []
    for name in names:
        try:
            text = read_beneath(root, name, 4 * MEMORY_MAX_CHARS + 4, cut=True).decode(
                "utf-8", "replace").strip()
        except OSError:
            continue
        if len(text) > MEMORY_MAX_CHARS:
            text = text[:MEMORY_MAX_CHARS] + f"\n… [{name} cut at {MEMORY_MAX_CHARS} characters]"
        if text:
            found.append(f"## {Path(name).name}\n{text}")
    return f"# {title}\n" + "\n\n".join(found) if found else ""


def _git(cwd: Path, *args: str) -> str:
    try:
        out = Git(cwd).run(*args, timeout=30, check=False, errors="replace")
    except (OSError, GitError, UserError) as exc:
        return f"(git {args[0]} failed: {exc})"
    return out.stdout.strip() if out.returncode == 0 else f"(not a git worktree: {cwd})"
