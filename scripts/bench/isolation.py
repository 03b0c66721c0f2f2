"""What issue 16's protections cost per task; prints each figure beside its goal.

    .venv/bin/python scripts/bench/isolation.py [--runs N]

- bash in the bubblewrap sandbox in a task worktree, per command: with git confined
  (`orchestrator.agent.git_confine`: private branch ref carried back, read-only git
  folder) against the older rule (the whole git folder writable), for a command
  that does not touch git and for one that commits;
- `protect_process` (non-dumpable + secrets overwritten in the environment block),
  once per process, in a fresh process;
- the secret scan of `commit_leftovers` (one `git diff --cached --name-only` and a
  read of each changed file), per task commit;
- parsing a bash command for the permission gate (tree-sitter-bash), per call, and
  the one-time import of the parser.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestrator.agent.base import ToolContext
from orchestrator.agent.sandbox import Sandbox, _probe, safe_env
from orchestrator.agent.tools.shell import BashTool

ROOT = Path(__file__).resolve().parents[2]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def median_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def line(what: str, value: float, goal: float) -> None:
    mark = "✓" if value <= goal else "✗"
    print(f"{mark} {what}: {value:.1f} ms (goal ≤ {goal:g} ms)")


class OldSandbox(Sandbox):
    """The rule before issue 16: no git confinement (the whole git folder writable)."""

    def confine_git(self, cwd: Path) -> None:  # type: ignore[override]
        return None


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=15)
    args = p.parse_args()
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@x"}
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        (repo / "README.md").write_text("x\n")
        git(repo, "add", "-A")
        git(repo, "-c", "user.name=b", "-c", "user.email=b@x", "commit", "-qm", "init")
        wt = repo / ".worktrees" / "task_001"
        git(repo, "worktree", "add", "-q", "-b", "task/001-x", str(wt))
        if _probe()[1] is None:
            for name, box in (("confined", Sandbox(enabled=True)),
                              ("older rule", OldSandbox(enabled=True))):
                ctx = ToolContext(cwd=wt, env=safe_env(env), services={"sandbox": box})
                tool = BashTool()
                plain = median_ms(lambda ctx=ctx, tool=tool: tool.run({"command": "true"}, ctx),
                                  args.runs)
                commit = median_ms(lambda ctx=ctx, tool=tool: tool.run(
                    {"command": "git commit -q --allow-empty -m x"}, ctx), args.runs)
                print(f"  bash `true` ({name}): {plain:.1f} ms; `git commit` ({name}): "
                      f"{commit:.1f} ms")
                if name == "confined":
                    confined = (plain, commit)
                else:
                    line("git confinement, per command (confined - older rule)",
                         confined[0] - plain, 10)
                    line("git confinement, per committing command", confined[1] - commit, 25)
        else:
            print(f"- bubblewrap unusable here ({_probe()[1]}): sandbox figures skipped")
        probe = ("import time; t=time.perf_counter(); from orchestrator.secrets import "
                 "protect_process; protect_process(); print((time.perf_counter()-t)*1000)")
        out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, check=True,
                             capture_output=True, text=True,
                             env={**env, "ANTHROPIC_API_KEY": "sk-ant-bench-0123456789"})
        line("protect_process, once per process (import included)", float(out.stdout), 50)
        from orchestrator.model import Task
        from orchestrator.team.commit import commit_leftovers

        os.environ["ANTHROPIC_API_KEY"] = "sk-ant-bench-0123456789"
        base = git(wt, "rev-parse", "HEAD")

        def task_commit() -> None:
            for i in range(20):
                (wt / f"f{i}.txt").write_text(f"{time.perf_counter()}\n")
            commit_leftovers(wt, Task(id="task_001", subject="bench"), "alice", base)

        with_scan = median_ms(task_commit, args.runs)
        del os.environ["ANTHROPIC_API_KEY"]
        without = median_ms(task_commit, args.runs)
        line("secret scan of a task commit (20 files)", with_scan - without, 25)
        t = time.perf_counter()
        from orchestrator.agent.shell_parse import analyze

        analyze("true")
        line("bash parser import, once per process", (time.perf_counter() - t) * 1000, 100)
        cmd = "cd src && FOO=1 timeout 60 npm test -- --watch=false 2>&1 | grep -v warn | " \
              "xargs -0 echo; bash -c 'make -j4 && ./run.sh' || echo $(date) > out.txt"
        line("parse of a 150-character command line, per call",
             median_ms(lambda: analyze(cmd), 200), 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
