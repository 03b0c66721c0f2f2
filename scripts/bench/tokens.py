#!/usr/bin/env python3
"""Prompt-cache benchmark: a 30-turn session of the anthropic backend against the
loopback Messages API (tests/loopback.py), which applies the issue's cache rule
(a prefix ending within 20 blocks before a breakpoint, cached at a breakpoint
before, is read from the cache; tokens ~ bytes / 4).

The session runs the real backend on a real board and worktree: read, edit and
run one small Python file, 29 tool calls, then a summary. Prints the first
request's size, the share of input tokens read from the cache, and the
cost-weighted input tokens (uncached + 1.25 x cache writes + 0.1 x cache reads).

    .venv/bin/python scripts/bench/tokens.py [--turns 30]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from orchestrator.backends import load_backend  # noqa: E402
from orchestrator.board import init_repo, open_board  # noqa: E402
from orchestrator.board.tasklogs import TaskLog  # noqa: E402
from orchestrator.config import Config  # noqa: E402
from orchestrator.protocols import RunContext  # noqa: E402
from orchestrator.worktree.manager import WorktreeManager, binding  # noqa: E402
from tests.helpers import make_repo  # noqa: E402
from tests.loopback import LoopbackAPI, Reply, text, tool_use  # noqa: E402

TARGET_FIRST_BYTES = 20_000
TARGET_READ_SHARE = 0.95
TARGET_WEIGHTED = 30_000
APP = "def greet():\n    return 'hello 0'\n\n\nprint(greet())\n"


def plan(turns: int) -> list[list[dict[str, Any]]]:
    """Reads, edits and shell commands on app.py, then a closing summary."""
    steps: list[list[dict[str, Any]]] = []
    k = 0
    while len(steps) < turns - 1:
        i = len(steps)
        kind = i % 3
        if kind == 0:
            steps.append([tool_use("read", {"file_path": "app.py"}, id=f"toolu_{i:02d}")])
        elif kind == 1:
            steps.append([tool_use("edit", {"file_path": "app.py", "old_string": f"'hello {k}'",
                                            "new_string": f"'hello {k + 1}'"},
                                   id=f"toolu_{i:02d}")])
            k += 1
        else:
            steps.append([tool_use("bash", {"command": "python3 app.py"}, id=f"toolu_{i:02d}")])
    steps.append([text(f"Done: greet() now returns 'hello {k}'; ran it after each edit.")])
    return steps


def run(turns: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp, LoopbackAPI() as api:
        repo = make_repo(Path(tmp) / "repo", {"app.py": APP})
        os.environ.update(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="sk-bench")
        steps = plan(turns)
        replies = iter(steps)

        def respond(body: dict[str, Any]) -> Reply:
            blocks = next(replies)
            stop = "tool_use" if blocks[0]["type"] == "tool_use" else "end_turn"
            return Reply(blocks, stop)

        api.responder = respond
        layout = init_repo(repo)
        config = Config.load(repo, environ={}, overrides={"agent": {
            "model": "claude-sonnet-4-6", "max_turns": turns + 1,
            "allow": ["Bash(python3 app.py)"]}})
        board = open_board(layout, config.board, actor="bench")
        try:
            task = board.add("Make greet() say hello 10",
                             description="Edit app.py step by step and run it after each edit.")
            task = board.claim("bench", task_id=task.id)
            assert task is not None and task.lease is not None
            ws = WorktreeManager(layout, config.worktree, board).create(task)
            task = board.update(task.id, task.lease.token, **binding(ws))
            ctx = RunContext(task=task, token=task.lease.token, teammate="bench", workspace=ws,
                             board=board, layout=layout, log=TaskLog(layout, task.id),
                             stop=threading.Event())
            result = load_backend("anthropic", config, layout).run(ctx)
        finally:
            board.close()
        if not result.ok:
            raise SystemExit(f"session failed: {result.error}")
        usages = api.usages
        uncached = sum(u.input_tokens for u in usages)
        reads = sum(u.cache_read_input_tokens for u in usages)
        writes = sum(u.cache_creation_input_tokens for u in usages)
        return {
            "turns": len(api.requests), "first_bytes": api.sizes[0],
            "read_share": reads / (uncached + reads + writes),
            "weighted": uncached + 1.25 * writes + 0.1 * reads,
            "uncached": uncached, "reads": reads, "writes": writes,
            "cost_usd": result.usage.cost_usd,
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=30)
    f = run(ap.parse_args().turns)
    ok = (f["first_bytes"] <= TARGET_FIRST_BYTES and f["read_share"] >= TARGET_READ_SHARE
          and f["weighted"] <= TARGET_WEIGHTED)
    print(f"turns (model requests):      {f['turns']:.0f}")
    print(f"first request:               {f['first_bytes']:.0f} bytes "
          f"(target <= {TARGET_FIRST_BYTES})")
    print(f"cache-read share of input:   {f['read_share']:.1%} (target >= {TARGET_READ_SHARE:.0%})")
    print(f"cost-weighted input tokens:  {f['weighted']:,.0f} (target <= {TARGET_WEIGHTED:,})")
    print(f"  uncached {f['uncached']:,.0f} | cache writes {f['writes']:,.0f} | "
          f"cache reads {f['reads']:,.0f} | priced ${f['cost_usd']:.4f}")
    print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
