"""Prompt assembly: fixed order, memory files, per-task rebuild, cache breakpoints."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.agent.prompt import (
    BASE_INSTRUCTIONS,
    PromptSources,
    build_prompt,
    with_message_breakpoints,
)
from orchestrator.agent.tools import default_tools
from orchestrator.agent.toolset import Toolset
from orchestrator.model import Task
from tests.helpers import make_repo

FIRST_REQUEST_MAX_BYTES = 20_000


def schemas(root: Path) -> list[dict]:  # type: ignore[type-arg]
    from orchestrator.agent.base import ToolContext
    from orchestrator.agent.permissions import PermissionGate

    return Toolset(default_tools(), PermissionGate(), ToolContext(cwd=root, env={})).schemas()


def count_breakpoints(obj: object) -> int:
    return json.dumps(obj).count('"cache_control"')


def test_parts_come_in_the_fixed_order(repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "CLAUDE.md").write_text("USER-MEMORY: prefer small commits")
    (repo / "CLAUDE.md").write_text("PROJECT-CLAUDE: run make test")
    (repo / "AGENTS.md").write_text("PROJECT-AGENTS: python 3.11")
    (repo / "dirty.py").write_text("x = 1\n")
    task = Task(id="task_004", subject="Fix the parser", description="DESCRIPTION-TEXT",
                feedback=["FEEDBACK-ONE: the tests still fail"])
    p = build_prompt(task, schemas(repo), PromptSources(repo, home=home,
                                                        mcp_capabilities="MCP-CAPS: github"))
    stable, per_task = p.system[0]["text"], p.system[1]["text"]
    assert p.system[0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in p.system[1]
    order = [stable.index(BASE_INSTRUCTIONS[:40]), stable.index("USER-MEMORY"),
             stable.index("PROJECT-CLAUDE"), stable.index("PROJECT-AGENTS")]
    assert order == sorted(order)
    order = [per_task.index("Fix the parser"), per_task.index("DESCRIPTION-TEXT"),
             per_task.index("FEEDBACK-ONE"), per_task.index(f"Working directory: {repo}"),
             per_task.index("?? dirty.py"), per_task.index("MCP-CAPS")]
    assert order == sorted(order)
    assert p.tools[-1]["cache_control"] == {"type": "ephemeral"}
    assert count_breakpoints(p.tools[:-1]) == 0
    assert "task_004" in p.first_message


def test_the_prompt_is_rebuilt_per_task_and_worktree(tmp_path: Path) -> None:
    a = make_repo(tmp_path / "a", {"AGENTS.md": "same memory"})
    b = make_repo(tmp_path / "b", {"AGENTS.md": "same memory", "extra.txt": "x"})
    (b / "new.txt").write_text("untracked")
    tools = schemas(a)
    pa = build_prompt(Task(id="task_001", subject="one"), tools, PromptSources(a, home=tmp_path))
    pb = build_prompt(Task(id="task_002", subject="two"), tools, PromptSources(b, home=tmp_path))
    assert pa.system[0] == pb.system[0]  # the stable part is shared: one cache entry
    assert pa.system[1] != pb.system[1]
    assert "new.txt" in pb.system[1]["text"] and "new.txt" not in pa.system[1]["text"]


def test_messages_get_two_breakpoints_without_changing_the_conversation() -> None:
    msgs = [
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "ls",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a",
                                      "content": "x"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "b", "name": "ls",
                                           "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b",
                                      "content": "y"}]},
    ]
    snapshot = json.dumps(msgs)
    marked = with_message_breakpoints(msgs)
    assert json.dumps(msgs) == snapshot
    assert count_breakpoints(marked) == 2
    assert "cache_control" in marked[-1]["content"][-1]
    assert "cache_control" in marked[2]["content"][-1]
    assert with_message_breakpoints(msgs[:1])[0]["content"][0]["cache_control"]


def test_first_request_is_small_and_has_at_most_four_breakpoints(repo: Path) -> None:
    p = build_prompt(Task(id="task_001", subject="Add a greeting"), schemas(repo),
                     PromptSources(repo, home=repo))
    body = {"model": "m", "max_tokens": 8192, "system": p.system, "tools": p.tools,
            "messages": with_message_breakpoints([{"role": "user",
                                                   "content": p.first_message}])}
    assert len(json.dumps(body)) <= FIRST_REQUEST_MAX_BYTES
    assert count_breakpoints(body) <= 4


def test_large_memory_files_are_cut(repo: Path) -> None:
    (repo / "CLAUDE.md").write_text("x" * 100_000)
    p = build_prompt(Task(id="task_001", subject="s"), [], PromptSources(repo, home=repo))
    assert len(p.system[0]["text"]) < 20_000 and "cut at" in p.system[0]["text"]
